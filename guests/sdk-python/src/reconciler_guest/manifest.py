"""What a guest asks the host to watch: `Manifest`, its `SecondaryWatch`es, the `Watch`es of
the optional `watches` export, and the `ComputedIndex`es of the optional `indexes` export.

Only the name and the primary kind are required; every other field has the WIT's neutral
value, so a guest names only what it wants:

    Manifest("greeter", Gvk("test.reconciler.dev", "v1", "Widget"), generation_changed_only=True)

A `Watch` says what a `SecondaryWatch` cannot (a field index, labels naming an owner in another
namespace, a map function, a namespace and label selector per kind); a guest returns them from
`Guest.watches()` and is exported with `export_watches` too (see `reconciler_guest.guest`):

    Watch(CONFIG_MAP).by_field("spec.source", IndexValue.NAME)
    Watch(CONFIG_MAP).by_owner_labels("example.com/owner-namespace", "example.com/owner-name")
        .selecting("example.com/owner-name")

A `ComputedIndex` is a watch whose values no field path can reach: the guest computes them from
each primary (`Guest.index`), and is exported with `export_indexes` too:

    ComputedIndex("configmaps", CONFIG_MAP)   # its ConfigMaps' names, looked up by name

Pure Python: the binding layer turns them into the WIT's `controller-manifest`, `watch` and
`computed-index`.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field, replace
from enum import Enum

from .objects import Gvk


@dataclass
class SecondaryWatch:
    """Another kind whose changes reconcile a primary: the one named in its
    `metadata.ownerReferences` (the default), or, with `label`, the one in the same namespace
    whose name is that label's value."""

    kind: Gvk
    label: str | None = None


@dataclass
class Manifest:
    """What the guest wants from the host; the host configuration must grant it.

    The defaults: every namespace, no label selector, no secondaries, no finalizer, the host's
    default concurrency, no resync, and every update of a primary reconciles it.
    """

    name: str
    """Unique guest name (a DNS-1123 label): field manager, metric label, key of its grant."""
    primary: Gvk
    """The kind whose keys this guest reconciles."""
    _: KW_ONLY
    namespace: str | None = None
    """Watch only this namespace."""
    label_selector: str | None = None
    """Watch only primaries matching this label selector (`app=web,tier!=db`)."""
    secondary: list[SecondaryWatch] = field(default_factory=list)
    """Other kinds whose changes reconcile a primary."""
    finalizer: str | None = None
    """The host keeps this finalizer (`example.com/cleanup`) on every primary until a
    reconcile with `deleting` succeeds, so external state is cleaned up before the object goes."""
    concurrency: int = 0
    """At most this many keys reconciled at once (0 = the host's default)."""
    resync_seconds: int = 0
    """Re-reconcile every key this often even without changes, e.g. to repair drift in
    external state (0 = never)."""
    generation_changed_only: bool = False
    """Reconcile a primary only when its `metadata.generation` changes (its spec, or its
    deletion), not on status, label or annotation writes, so a guest that writes its status
    on every reconcile does not wake itself. Creation, deletion, secondaries, requeues and
    resync still reconcile."""

    def __post_init__(self) -> None:
        # Caught here, these read as the guest's mistake; caught by the bindings at load, as
        # a failure to lower a record.
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Manifest name must be a non-empty str, not {self.name!r}")
        if not isinstance(self.primary, Gvk):
            raise TypeError(f"Manifest primary must be a Gvk, not {self.primary!r}")


class IndexValue(Enum):
    """What of a watched object a field index compares with the primary's field."""

    NAME = "name"
    """Its name: a namespaced object matches primaries in its own namespace, a cluster-scoped
    one (a Namespace) primaries in every namespace."""
    NAMESPACE = "namespace"
    """Its namespace: primaries in every namespace whose field names it."""
    NAMESPACED_NAME = "namespaced-name"
    """Its `namespace/name` (its name alone when cluster-scoped): primaries in every namespace."""


@dataclass(frozen=True)
class Owner:
    """Through `metadata.ownerReferences` entries whose kind is the primary kind."""


@dataclass(frozen=True)
class Label:
    """Through this label, whose value is the primary's name in the same namespace."""

    label: str


@dataclass(frozen=True)
class OwnerLabels:
    """Through labels naming the primary: `name`'s value its name, `namespace`'s its namespace
    (`None` for a cluster-scoped primary). Label values hold at most 63 characters."""

    name: str
    namespace: str | None = None


@dataclass(frozen=True)
class FieldIndex:
    """To the primaries whose `field` (`spec.source`, `spec.targetNamespaces[*]`,
    `spec.refs[*].name`) equals the object's `value`: an index the host keeps, no guest call."""

    field: str
    value: IndexValue = IndexValue.NAME


@dataclass(frozen=True)
class Function:
    """Through the guest's `map(kind, obj)`, called once per event of the kind."""


WatchMapping = Owner | Label | OwnerLabels | FieldIndex | Function


@dataclass(frozen=True)
class Watch:
    """Objects of `kind` whose changes reconcile the primaries `mapping` names.

    The defaults: through owner references, in the primary watch's namespace (every namespace
    when the manifest names none), whatever their labels. Each method returns a changed copy:

        Watch(NAMESPACE).by_field("spec.targetNamespaces[*]", IndexValue.NAME)
    """

    kind: Gvk
    mapping: WatchMapping = Owner()
    _: KW_ONLY
    namespace: str | None = None
    """Watch this namespace only (ignored for cluster-scoped kinds)."""
    label_selector: str | None = None
    """Take only events of objects matching this selector. The events come from the lister's
    cache of the kind, which this does not narrow: the grant's `readSelectors` bound it."""

    def __post_init__(self) -> None:
        if not isinstance(self.kind, Gvk):
            raise TypeError(f"Watch kind must be a Gvk, not {self.kind!r}")
        if not isinstance(self.mapping, WatchMapping):
            raise TypeError(f"Watch mapping must be one of {WatchMapping}, not {self.mapping!r}")

    def by_owner(self) -> Watch:
        """Through owner references (the default)."""
        return replace(self, mapping=Owner())

    def by_label(self, label: str) -> Watch:
        """Through `label`, whose value is the primary's name in the object's namespace."""
        return replace(self, mapping=Label(label))

    def by_owner_labels(self, namespace_label: str | None, name_label: str) -> Watch:
        """Through two labels naming the primary's namespace and name: for children that can
        carry no owner reference (in another namespace, or cluster-scoped). `namespace_label`
        `None` for a cluster-scoped primary."""
        return replace(self, mapping=OwnerLabels(name_label, namespace_label))

    def by_field(self, field: str, value: IndexValue = IndexValue.NAME) -> Watch:
        """To the primaries whose `field` equals the object's `value`, through an index the host
        keeps over its primary cache; a value that is not a string is not indexed."""
        if not isinstance(value, IndexValue):
            raise TypeError(f"by_field value must be an IndexValue, not {value!r}")
        return replace(self, mapping=FieldIndex(field, value))

    def by_function(self) -> Watch:
        """Through the guest's `map(kind, obj)`: the most flexible mapping, and the dearest."""
        return replace(self, mapping=Function())

    def in_namespace(self, namespace: str) -> Watch:
        """Watch this namespace only."""
        return replace(self, namespace=namespace)

    def selecting(self, label_selector: str) -> Watch:
        """Take only events of objects matching `label_selector` (`app=web,tier!=db`)."""
        return replace(self, label_selector=label_selector)


@dataclass(frozen=True)
class ComputedIndex:
    """An index over the primaries whose values the guest computes from each one
    (`Guest.index(name, primary)`), and a watch of `kind` whose objects are looked up among
    them: by name (the default; among the primaries of the object's namespace), namespace, or
    `namespace/name` (`lookup`, an `IndexValue`). controller-runtime's `IndexField` with an
    extractor function, for what a field path cannot say: names in a comma-separated
    annotation, a value built from two fields.

    `name` (a DNS-1123 label, unique among the guest's indexes; the host checks both at load)
    names it in `index` calls, logs and metrics. Each method returns a changed copy:

        ComputedIndex("configmaps", CONFIG_MAP).by(IndexValue.NAMESPACED_NAME).selecting("app")
    """

    name: str
    kind: Gvk
    lookup: IndexValue = IndexValue.NAME
    _: KW_ONLY
    namespace: str | None = None
    """As a `Watch`'s: watch this namespace only."""
    label_selector: str | None = None
    """As a `Watch`'s: take only events of objects matching this selector."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"ComputedIndex name must be a non-empty str, not {self.name!r}")
        if not isinstance(self.kind, Gvk):
            raise TypeError(f"ComputedIndex kind must be a Gvk, not {self.kind!r}")
        if not isinstance(self.lookup, IndexValue):
            raise TypeError(f"ComputedIndex lookup must be an IndexValue, not {self.lookup!r}")

    def by(self, lookup: IndexValue) -> ComputedIndex:
        """Look up the watched object's namespace or `namespace/name` instead of its name."""
        return replace(self, lookup=lookup)

    def in_namespace(self, namespace: str) -> ComputedIndex:
        """Watch this namespace only."""
        return replace(self, namespace=namespace)

    def selecting(self, label_selector: str) -> ComputedIndex:
        """Take only events of objects matching `label_selector`."""
        return replace(self, label_selector=label_selector)
