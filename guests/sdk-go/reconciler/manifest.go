package reconciler

import (
	"slices"
	"time"
)

// Manifest is what a guest asks the host to watch; the host configuration must grant it.
// Build it with [NewManifest] and the With methods (each returns a changed copy), or as a
// struct literal: every field's zero value is the contract's default.
type Manifest struct {
	// Unique guest name (a DNS-1123 label): field manager, metric label, the key of its grant.
	Name string
	// The kind whose keys the guest reconciles.
	Primary GVK
	// Only this namespace's primaries; "" = all namespaces.
	Namespace string
	// Only primaries matching this label selector; "" = all.
	LabelSelector string
	// Other kinds whose changes enqueue a primary key.
	Secondary []SecondaryWatch
	// When set, the host keeps this finalizer on every primary until a reconcile with
	// Deleting succeeds (a qualified name in the guest's own domain, e.g.
	// `example.com/cleanup`).
	Finalizer string
	// At most this many keys reconciled at once; 0 = the host's default.
	Concurrency uint32
	// Re-reconcile every key this often even without changes; 0 = never.
	ResyncSeconds uint32
	// Reconcile a primary only when its metadata.generation changes (or on creation,
	// deletion, secondaries, requeues and resync), not on status, label or annotation writes.
	GenerationChangedOnly bool
}

// SecondaryWatch is another kind whose changes enqueue a primary key.
type SecondaryWatch struct {
	Kind GVK
	// The label whose value names the primary (in the same namespace); "" = through
	// metadata.ownerReferences entries of the primary kind.
	Label string
}

// NewManifest is a guest named name reconciling every object of primary in all namespaces,
// with no secondaries, no finalizer, the host's default concurrency and no resync.
func NewManifest(name string, primary GVK) Manifest {
	return Manifest{Name: name, Primary: primary}
}

// WithNamespace watches only this namespace.
func (m Manifest) WithNamespace(namespace string) Manifest {
	m.Namespace = namespace
	return m
}

// WithLabelSelector watches only primaries matching this label selector.
func (m Manifest) WithLabelSelector(selector string) Manifest {
	m.LabelSelector = selector
	return m
}

// Owns reconciles a primary when an object of kind that it owns (through
// metadata.ownerReferences) changes.
func (m Manifest) Owns(kind GVK) Manifest {
	// Clipped: manifests built from one base must not share the appended entry.
	m.Secondary = append(slices.Clip(m.Secondary), SecondaryWatch{Kind: kind})
	return m
}

// WatchesByLabel reconciles a primary when an object of kind whose label names it changes.
func (m Manifest) WatchesByLabel(kind GVK, label string) Manifest {
	m.Secondary = append(slices.Clip(m.Secondary), SecondaryWatch{Kind: kind, Label: label})
	return m
}

// WithFinalizer keeps this finalizer on every primary until a reconcile with Deleting
// succeeds, so external state is cleaned up before the object goes.
func (m Manifest) WithFinalizer(finalizer string) Manifest {
	m.Finalizer = finalizer
	return m
}

// WithConcurrency reconciles at most n keys at once (0 = the host's default).
func (m Manifest) WithConcurrency(n uint32) Manifest {
	m.Concurrency = n
	return m
}

// WithResync re-reconciles every key this often even without changes, e.g. to repair drift
// in external state; rounded up to whole seconds (0 = never).
func (m Manifest) WithResync(every time.Duration) Manifest {
	m.ResyncSeconds = uint32(min(ceilDiv(every, time.Second), 1<<32-1))
	return m
}

// WithGenerationChangedOnly reconciles a primary only when its metadata.generation changes,
// so that a guest recording something new in its status on every reconcile does not wake
// itself. Creation, deletion, secondaries, requeues and resync still reconcile.
func (m Manifest) WithGenerationChangedOnly() Manifest {
	m.GenerationChangedOnly = true
	return m
}

// ceilDiv is d in whole units, rounded up; 0 for d <= 0.
func ceilDiv(d, unit time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64((d-1)/unit) + 1
}
