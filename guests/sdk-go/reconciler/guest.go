package reconciler

import (
	"fmt"
	"time"
)

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

// watchesExported is set when the component exports the contract's `watches`: the SDK's package
// export_reconciler_api_watches, which the bindings link in for the world
// `watching-controller` only.
var watchesExported bool

// ExportsWatches records that the component exports `watches`; package
// export_reconciler_api_watches calls it from its init. Guests do not call it.
func ExportsWatches() { watchesExported = true }

// indexesExported is set by the `indexes` export's package (export_reconciler_api_indexes,
// present only when the component's world has it).
var indexesExported bool

// ExportsIndexes records that the component exports `indexes`; the export's package calls it.
// Guests do not.
func ExportsIndexes() { indexesExported = true }

// exportedManifest is the registered manifest for the `manifest` export. Watches the component
// cannot export would be lost without a word, so it panics (the host refuses the guest at load
// with this message) when the guest declares some and the component was built for a world
// without `watches`.
func exportedManifest() Manifest {
	m := registered()
	if len(m.Watches) > 0 && !watchesExported {
		panic(fmt.Sprintf("reconciler: the manifest declares %d Watches, but this component does not "+
			"export reconciler:api/watches: build it for the world `watching-controller` (a `wit-world` "+
			"file beside go.mod holding that name)", len(m.Watches)))
	}
	if len(IndexesExport()) > 0 && !indexesExported {
		panic("reconciler: the manifest declares a ByIndex watch, but this component does not " +
			"export reconciler:api/indexes: build it for the world `indexing-controller` (a `wit-world` " +
			"file beside go.mod holding that name)")
	}
	return m
}

// WatchesExport is the component's `watches` export in the SDK's types: the registered
// manifest's Watches, checked. Guests do not call it.
func WatchesExport() []Watch {
	m := registered()
	var watches []Watch
	for i, watch := range m.Watches {
		if watch.Mapping.By > MapIndex {
			panic(fmt.Sprintf("reconciler: Watches[%d] (%s) has no mapping %d: use ByOwner, ByLabel, "+
				"ByOwnerLabels, ByField, ByFunc or ByIndex", i, describeKind(watch.Kind), watch.Mapping.By))
		}
		if watch.Mapping.By == MapFunction && watch.Mapping.Func == nil {
			panic(fmt.Sprintf("reconciler: Watches[%d] (%s) maps ByFunc(nil): give it the function "+
				"that maps an object to primary keys", i, describeKind(watch.Kind)))
		}
		if watch.Mapping.By != MapIndex {
			watches = append(watches, watch)
		}
	}
	return watches
}

// IndexesExport is the component's `indexes` export in the SDK's types: the registered
// manifest's [ByIndex] watches, checked. Guests do not call it.
func IndexesExport() []Watch {
	var indexes []Watch
	for i, watch := range registered().Watches {
		if watch.Mapping.By != MapIndex {
			continue
		}
		if watch.Mapping.IndexFunc == nil {
			panic(fmt.Sprintf("reconciler: Watches[%d] (%s) maps ByIndex(%q, ..., nil): give it the "+
				"function that computes a primary's values", i, describeKind(watch.Kind), watch.Mapping.Index))
		}
		indexes = append(indexes, watch)
	}
	return indexes
}

// IndexExport is the component's `index` export in the SDK's types: the values index name's
// function computes for the primary (JSON text). A function's error is logged and traps the
// instance (see [IndexFunc]). Guests do not call it.
func IndexExport(name string, primary string) []string {
	obj := &Object{text: primary, what: "the primary to index"}
	for _, watch := range IndexesExport() {
		if watch.Mapping.Index != name {
			continue
		}
		values, err := watch.Mapping.IndexFunc(obj)
		if err != nil {
			what := "a primary"
			if ref, ok := obj.Ref(); ok {
				what = ref.String()
			}
			message := fmt.Sprintf("index %s of %s: %v", name, what, err)
			Log(LevelError, message)
			panic(message)
		}
		return values
	}
	LogWarnf("index was called for %q, which no ByIndex watch declares: no values", name)
	return nil
}

// MapExport is the component's `map` export in the SDK's types: the keys of every [ByFunc]
// watch of kind for the object (JSON text), each key once, in the order the functions gave
// them. A function's error is logged and traps the instance (see [MapFunc]). Guests do not
// call it.
func MapExport(kind GVK, object string) []ObjectKey {
	m := registered()
	obj := &Object{text: object, what: "the " + kind.Kind + " to map"}
	var keys []ObjectKey
	seen := map[ObjectKey]bool{}
	mapped := false
	for _, watch := range m.Watches {
		if watch.Kind != kind || watch.Mapping.By != MapFunction || watch.Mapping.Func == nil {
			continue
		}
		mapped = true
		got, err := watch.Mapping.Func(obj)
		if err != nil {
			what := describeKind(kind)
			if ref, ok := obj.Ref(); ok {
				what = ref.String()
			}
			message := fmt.Sprintf("map %s: %v", what, err)
			Log(LevelError, message)
			panic(message)
		}
		for _, key := range got {
			if !seen[key] {
				seen[key] = true
				keys = append(keys, key)
			}
		}
	}
	if !mapped {
		LogWarnf("map was called for %s, which no ByFunc watch declares: no keys", describeKind(kind))
	}
	return keys
}

// describeKind is `Kind group/version`, e.g. `ConfigMap v1`.
func describeKind(kind GVK) string { return kind.Kind + " " + kind.APIVersion() }
