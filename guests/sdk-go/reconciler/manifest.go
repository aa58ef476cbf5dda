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
	// Watches beyond Secondary's owner and label mappings: field indexes, owner labels, map
	// functions, a namespace and label selector per kind. They are the contract's optional
	// `watches` export, so a guest that declares any is built for the world
	// `watching-controller` (a `wit-world` file beside go.mod saying so); without it the
	// manifest panics at load, naming that fix. Secondary and Watches together hold at most 16.
	Watches []Watch
}

// SecondaryWatch is another kind whose changes enqueue a primary key.
type SecondaryWatch struct {
	Kind GVK
	// The label whose value names the primary (in the same namespace); "" = through
	// metadata.ownerReferences entries of the primary kind.
	Label string
}

// Watch is a kind whose changes enqueue primary keys, with a mapping [SecondaryWatch] cannot
// say, or a namespace or label selector of its own.
type Watch struct {
	Kind GVK
	// How an object of Kind leads to primary keys: [ByOwner] (the zero value), [ByLabel],
	// [ByOwnerLabels], [ByField], [ByFunc] or [ByIndex].
	Mapping WatchMapping
	// Watch only this namespace; "" = the manifest's Namespace when set, every namespace
	// otherwise. Ignored for cluster-scoped kinds.
	Namespace string
	// Take only events of objects matching this label selector; "" = all. It filters events,
	// not the host's cache of the kind, which the grant's readSelectors bound.
	LabelSelector string
}

// WatchMapping is how an object of a watched kind maps to primary keys (the contract's
// `watch-mapping`). Build it with the By functions; the zero value is [ByOwner].
type WatchMapping struct {
	// Which of the contract's mappings this is.
	By MappingKind
	// MapLabel: the label whose value is the primary's name. MapOwnerLabels: the label whose
	// value is the primary's name.
	Label string
	// MapOwnerLabels: the label whose value is the primary's namespace; "" for a
	// cluster-scoped primary.
	NamespaceLabel string
	// MapField: the primary's field and what of the watched object it holds.
	Field FieldIndex
	// MapFunction: the function that maps an object of the kind to primary keys.
	Func MapFunc
	// MapIndex: the index's name, what of the watched object is looked up (Field.Value), and
	// the function that computes a primary's values.
	Index     string
	IndexFunc IndexFunc
}

// MappingKind names one of the contract's watch mappings.
type MappingKind uint8

// The watch mappings, in the contract's order, with what each costs the host.
const (
	// Through metadata.ownerReferences entries of the primary kind; only the secondary cache.
	MapOwner MappingKind = iota
	// Through a label naming the primary in the same namespace; only the secondary cache.
	MapLabel
	// Through two labels naming the primary's namespace and name, for children an owner
	// reference cannot reach (another namespace, cluster-scoped); only the secondary cache.
	MapOwnerLabels
	// Through an index of a field of the primary, kept by the host: an index entry per value
	// per primary, and no guest call per event.
	MapField
	// Through the guest's [MapFunc]: one call of the guest, in a fresh instance, per event.
	MapFunction
	// Through an index of values the guest's [IndexFunc] computes from each primary, kept by
	// the host: one call of the guest per change of a primary, none per event of the kind
	// (the contract's optional `indexes` export, not a `watch-mapping`).
	MapIndex
)

// FieldIndex is "the primaries whose Field equals this object's Value", an index the host
// keeps over the primary cache (client-go's Indexer, controller-runtime's field indexes).
type FieldIndex struct {
	// A path into the primary: fields separated by dots, `[*]` for every item of a list, e.g.
	// `spec.source`, `spec.targetNamespaces[*]`, `spec.refs[*].name`. Values that are not
	// strings are not indexed.
	Field string
	Value IndexValue
}

// IndexValue is what of a watched object a [FieldIndex] compares with the primary's field.
type IndexValue uint8

// The index values, in the contract's order.
const (
	// The object's name. A namespaced object matches primaries in its own namespace; a
	// cluster-scoped one (a Namespace) matches primaries in every namespace.
	IndexName IndexValue = iota
	// The object's namespace: primaries in every namespace whose field names it.
	IndexNamespace
	// The object's `namespace/name` (its name alone when cluster-scoped): primaries in every
	// namespace.
	IndexNamespacedName
)

// MapFunc is the primary keys an object of a [ByFunc] watch's kind affects; none for no key.
// The host calls it on each add, update (with the new, then the old version) and delete of such
// an object, in a fresh instance in which only reads ([Get], [List]) are answered. An error
// is logged at error level and traps the instance: the host logs and counts a failed map and
// drops that event's keys (the next change or resync repairs them). At most 1,000 keys count.
type MapFunc func(object *Object) ([]ObjectKey, error)

// IndexFunc is the values of a [ByIndex] index for one primary object: for an [IndexName]
// index, the names of the watched objects the primary depends on. The host calls it when a
// primary is added or changes (and for every primary when a new version of the guest loads),
// in a fresh instance in which every host call but Log is refused: compute from the object alone. An
// error is logged and traps the instance: the host leaves that primary out of the index until
// its next change. At most 100 values of at most 317 bytes each count.
type IndexFunc func(primary *Object) ([]string, error)

// ByOwner maps through metadata.ownerReferences entries whose kind is the primary kind.
func ByOwner() WatchMapping { return WatchMapping{By: MapOwner} }

// ByLabel maps through label, whose value is the primary's name in the object's namespace.
func ByLabel(label string) WatchMapping { return WatchMapping{By: MapLabel, Label: label} }

// ByOwnerLabels maps through two labels naming the primary: namespaceLabel its namespace ("" for
// a cluster-scoped primary) and nameLabel its name. Label values hold at most 63 characters,
// so this reaches primaries whose names are that short.
func ByOwnerLabels(namespaceLabel, nameLabel string) WatchMapping {
	return WatchMapping{By: MapOwnerLabels, NamespaceLabel: namespaceLabel, Label: nameLabel}
}

// ByField maps to the primaries whose field (a path, see [FieldIndex]) equals the object's
// value, through an index the host keeps; no guest call per event.
func ByField(field string, value IndexValue) WatchMapping {
	return WatchMapping{By: MapField, Field: FieldIndex{Field: field, Value: value}}
}

// ByFunc maps through map, one call of the guest per event of the kind: the most general
// mapping, and the most expensive.
func ByFunc(mapper MapFunc) WatchMapping { return WatchMapping{By: MapFunction, Func: mapper} }

// ByIndex maps through index name (1-63 lowercase letters, digits and `-`), whose values
// values computes from each primary (controller-runtime's IndexField with an extractor): an
// object of the watched kind wakes the primaries that have its name (lookup [IndexName],
// among the primaries of its namespace), its namespace ([IndexNamespace]) or its
// `namespace/name` ([IndexNamespacedName]) among their values. The host keeps the index; an
// event of the kind is a lookup in its memory, no guest call. The component must be built for
// the world `indexing-controller`.
func ByIndex(name string, lookup IndexValue, values IndexFunc) WatchMapping {
	return WatchMapping{By: MapIndex, Index: name, Field: FieldIndex{Value: lookup}, IndexFunc: values}
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

// Watch adds watches (see [Watch]); a guest that declares any is built for the world
// `watching-controller`.
func (m Manifest) Watch(watches ...Watch) Manifest {
	m.Watches = append(slices.Clip(m.Watches), watches...)
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
