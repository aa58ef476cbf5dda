package reconciler

// imports is the contract's imports (wit/reconciler.wit) in the SDK's types, one method per
// host function and nothing else: in a component, the generated bindings (host_wasip1.go); in
// the SDK's native tests, a fake. Everything around a call (encoding, decoding, errors,
// logging) is in the exported functions, so that it is tested natively.
//
// A guest that never calls, say, List does not import the lister: the Go linker keeps only
// the methods of this interface that some reachable code calls.
type imports interface {
	// lister
	get(ref ObjectRef) (object string, found bool, err error)
	list(kind GVK, namespace, labelSelector string) ([]string, error)
	// cluster
	patchStatus(ref ObjectRef, patch string) (string, error)
	apply(object string) (string, error)
	applyWith(object string, force bool) (string, error)
	delete(ref ObjectRef) (bool, error)
	recordEvent(event Event) error
	// queue
	enqueue(key ObjectKey, afterMs uint64, delayed bool) error
	// log
	log(level Level, message string)
}

// hostCalls is set by host_wasip1.go's init in a component, and by tests.
var hostCalls imports

func host() imports {
	if hostCalls == nil {
		panic("reconciler: no host to call: host calls work only inside the component (GOOS=wasip1); " +
			"a native test must not reach Get, List, PatchStatus, Apply, Delete, RecordEvent, Enqueue or Log")
	}
	return hostCalls
}
