//go:build wasip1 && reconciler_preinit

package reconciler

// Compiled in only for a pre-initialised build (a guest with a `preinit` file: guests/lib.sh
// adds -tags reconciler_preinit), so every other build is unchanged.
//
// `reconciler-host componentize preinit` snapshots the core module after Go's init and exports
// prime as the snapshot's `_initialize`, which the component runs first in every instance. The
// component's WASI adapter allocates its state through cabi_realloc at its first call; in a
// snapshot, Go's init has already switched cabi_realloc to Go's allocator, which calls the
// adapter again from inside that first call, and the adapter traps. prime makes one WASI call
// (a clock read) with cabi_realloc on its sbrk path, as it is during init.

import (
	"time"
	_ "unsafe" // go:linkname

	_ "go.bytecodealliance.org/pkg/wit/runtime"
)

// The switch between cabi_realloc's two paths. It is not exported: go:linkname reaches it
// (allowed by -checklinkname=0, which the bindings need too), so it is pinned by the version
// of go.bytecodealliance.org/pkg in the guest's go.sum.
//
//go:linkname witUseGCAllocations go.bytecodealliance.org/pkg/wit/runtime.useGCAllocations
var witUseGCAllocations bool

// Keeps the clock read from being dropped as dead code.
var primeSink int64

//go:wasmexport reconciler_prime
func prime() {
	gc := witUseGCAllocations
	witUseGCAllocations = false
	primeSink = time.Now().UnixNano()
	witUseGCAllocations = gc
}
