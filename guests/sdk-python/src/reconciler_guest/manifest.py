"""What a guest asks the host to watch: `Manifest`, and its `SecondaryWatch`es.

Only the name and the primary kind are required; every other field has the WIT's neutral
value, so a guest names only what it wants:

    Manifest("greeter", Gvk("test.reconciler.dev", "v1", "Widget"), generation_changed_only=True)

Pure Python: the binding layer turns it into the WIT's `controller-manifest`.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field

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
