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
//
// Go copies the environment at init, which ran at build time with none; prime then reads the
// instance's own (the grant's `env`) into os.Setenv, so that os.Getenv sees it as in a plain
// build.

import (
	"bytes"
	"os"
	"time"
	"unsafe"

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
	loadEnvironment()
}

//go:wasmimport wasi_snapshot_preview1 environ_sizes_get
func environSizesGet(count, size unsafe.Pointer) uint32

//go:wasmimport wasi_snapshot_preview1 environ_get
func environGet(pointers, strings unsafe.Pointer) uint32

// loadEnvironment sets every variable of the instance's environment with os.Setenv.
func loadEnvironment() {
	var count, size uint32
	if environSizesGet(unsafe.Pointer(&count), unsafe.Pointer(&size)) != 0 || count == 0 {
		return
	}
	pointers := make([]uint32, count) // wasm32 addresses, written by the host
	strings := make([]byte, size)
	if environGet(unsafe.Pointer(&pointers[0]), unsafe.Pointer(&strings[0])) != 0 {
		return
	}
	for _, entry := range bytes.Split(bytes.TrimSuffix(strings, []byte{0}), []byte{0}) {
		if key, value, ok := bytes.Cut(entry, []byte{'='}); ok {
			os.Setenv(string(key), string(value))
		}
	}
}
