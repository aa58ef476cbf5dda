// Copied by the Go recipe (guests/lib.sh) into the main package of every Go guest; a project
// `reconciler-host new --lang go` writes holds it in its own.

package main

import "runtime/debug"

// The host runs each reconcile in a fresh instance and throws its memory away afterwards, so a
// garbage collection can only cost time, and it can do harm: Go's GC may run inside
// `cabi_realloc` while the host is copying a large result (an object of a few MB) into the
// guest, and it then calls WASI (`poll_oneoff`), which the component model forbids during a
// lowering ("cannot leave component instance"). The guest's memory cap (`limits.memoryMiB`)
// still bounds how much one reconcile can allocate.
func init() {
	debug.SetGCPercent(-1)
}
