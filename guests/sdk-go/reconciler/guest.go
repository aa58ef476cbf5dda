package reconciler

import "time"

// ReconcileFunc drives the object named by req.Ref towards its spec. It returns what to do
// next, or an error: see [Register] for how an error is retried.
type ReconcileFunc func(req *Request) (Action, error)

// Action is what to do after a successful reconcile. The zero Action waits for the next
// change of the object (or a watched secondary), or the manifest's resync.
type Action struct {
	// Reconcile this key again after this long, e.g. to poll something external; rounded up
	// to milliseconds. 0 = only on change.
	RequeueAfter time.Duration
}

// requeueAfterMs is the contract's requeue-after-ms: none (false) for the zero Action.
func (a Action) requeueAfterMs() (uint64, bool) {
	return ceilDiv(a.RequeueAfter, time.Millisecond), a.RequeueAfter > 0
}

// The guest, as registered.
var (
	manifest  Manifest
	reconcile ReconcileFunc
)

// Register makes manifest and reconcile the component's guest. Call it once, from an init
// function of the guest's package:
//
//	func init() {
//		reconciler.Register(reconciler.NewManifest("hello", widget), reconcile)
//	}
//
// The host asks for the manifest once when it loads the component and calls reconcile for
// every key, by default each call in a fresh instance (init runs again each time, so keep
// Register cheap): keep no state between calls; read it from the request, the lister or the
// backend.
//
// An error reconcile returns is retried as the first of these says:
//   - a [ReconcileError] in its chain ([Transient], [Permanent], their f forms);
//   - a [HostError] in its chain: `conflict`, `unavailable` and `other` are transient; `invalid`,
//     `denied` and `not-found` permanent (the same call would fail again until the object or the
//     configuration changes), see [HostError.Transient];
//   - anything else is transient (its cause is unknown; backoff is the safe default).
//
// The message the host records is err.Error(). A panic traps the instance; the host records
// the panic's message and stack (Go writes them to stderr) as the reconcile's error.
func Register(m Manifest, r ReconcileFunc) {
	if reconcile != nil {
		panic("reconciler: Register was called twice: a component holds one guest")
	}
	if r == nil {
		panic("reconciler: Register needs a reconcile function, not nil")
	}
	manifest, reconcile = m, r
}

// registered is the registered manifest; it panics when nothing was registered.
func registered() Manifest {
	if reconcile == nil {
		panic("reconciler: no guest registered: call reconciler.Register(manifest, reconcile) from an init function")
	}
	return manifest
}

// run is the component's reconcile in the SDK's types; the caller classifies an error
// (classify).
func run(req *Request) (Action, error) {
	registered()
	return reconcile(req)
}
