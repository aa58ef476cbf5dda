// Package reconciler is the Go SDK for reconciler-host guests.
//
// A guest is one [Register] call, from an init function: what it wants watched ([Manifest])
// and what one reconcile of a key does ([ReconcileFunc]).
//
//	package export_reconciler_api_reconciler
//
//	import "wit_component/reconciler"
//
//	func init() {
//		hello := reconciler.GVK{Group: "example.com", Version: "v1", Kind: "Hello"}
//		reconciler.Register(reconciler.NewManifest("hello", hello).WithConcurrency(2), reconcile)
//	}
//
//	func reconcile(req *reconciler.Request) (reconciler.Action, error) {
//		reconciler.LogInfof("reconciling %s", req.Ref)
//		return reconciler.Action{}, nil
//	}
//
// Everything else is à la carte, one file per host interface of wit/reconciler.wit (the
// contract), each a few functions:
//
//	lister.go      Get, List, DecodeAll: cache reads
//	cluster.go     PatchStatus, Apply, Delete: writes to the API server
//	event.go       RecordEvent, NormalEvent, WarningEvent: Kubernetes events
//	queue.go       Enqueue: other keys of the guest's own kind
//	log.go         Log, LogInfof and friends: the host's log stream
//	conditions.go  SetCondition and friends: status.conditions with a stable lastTransitionTime
//	errors.go      HostError, Transient, Permanent: how failures are retried
//	fakehost.go    UseFakeHost: the host of native tests (go test), never built into a component
//
// and two subpackages for the other worlds: networkbackend for the Network sample's backend
// (`network-controller`), and wasihttp, outbound HTTP through the standard http.Client
// (`http-controller`).
//
// Objects cross the boundary as JSON text; an [Object] is decoded only when the guest asks
// ([Object.Decode] into its own struct, or [Object.Fields]), so a guest that never reads the
// object a write returned does not pay for decoding it.
//
// # How it is built
//
// A Go guest is a module named `wit_component`, the path wit-bindgen's Go generator imports
// its bindings by (wit_component/reconciler_api_cluster, ...). The build (guests/lib.sh) puts
// this package at wit_component/reconciler, generates the bindings beside it, and adds the
// SDK's export_reconciler_api_reconciler/reconciler_exports.go, which hands the component's
// two exports to what the guest registered (and, for the world `watching-controller`,
// export_reconciler_api_watches/watches_exports.go, which hands it the manifest's [Watch]es). Only the *_wasip1.go files touch the generated
// bindings; the rest, every rule of the SDK, builds and is tested natively (guests/sdk-go,
// ./test.sh). A guest's code may live in package export_reconciler_api_reconciler (as the
// scaffold's and this repository's guests do) or in any other package of its module.
//
// A guest that never calls an interface does not import it: the Go linker drops what no
// reachable code calls, so a greeter that only writes status and events imports `cluster` and
// `log`, not `lister` or `queue`.
//
// # Costs
//
// By default every reconcile runs in a fresh instance: the Go runtime starts, init functions
// (Register among them) run, one reconcile, and the memory is thrown away. Go's garbage collector is off
// (guests/go/gc.go, why there); the guest's memory cap bounds what one reconcile allocates.
// The SDK adds about 40 KB to the greeter's 3.4 MB component (60 KB to the Network guest's,
// with conditions and the network backend). It avoids [errors.As], whose reflection costs a Go guest ~55 KB: use
// [AsHostError]; [errors.Is] with the Err* values costs ~10 KB.
//
// A panic traps the instance; the host records its message and stack (Go writes them to
// stderr, which the host keeps for a trap) as the reconcile's error.
package reconciler
