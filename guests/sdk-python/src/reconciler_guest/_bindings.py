"""The binding layer, the only module of the package that imports what componentize-py
generates from the WIT (`wit_world`, `componentize_py_types`; `network_backend` and `http`,
which a guest imports itself for the worlds that have them, import theirs): it converts between
the SDK's types and the generated records, turns an import's `Err` into a `HostError`, and holds
`host`, what the interface modules (`lister`, `cluster`, `event`, `queue`, `log`) call.

`host` takes the SDK's values and the JSON text that crosses the boundary, so the SDK's own
checks (JSON serialisation, delays, log formatting) run before any implementation of it:

- in a component, `WitHost`: the generated imports, looked up at each call (`module.function`),
  never bound at import time, so tests with generated bindings can replace them;
- natively without generated bindings (a guest's unit tests under plain pytest), a host that
  refuses every call until a `reconciler_guest.testing.FakeHost` takes its place. The exports,
  which only the host calls, are not called there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

try:
    from componentize_py_types import Err
    from wit_world.exports import reconciler as wit_reconciler
    from wit_world.imports import cluster as wit_cluster
    from wit_world.imports import lister as wit_lister
    from wit_world.imports import log as wit_log
    from wit_world.imports import queue as wit_queue

    try:
        from wit_world.imports import types as wit
    except ImportError:
        # A world that also imports wasi:http (`http-controller`) has two interfaces named
        # `types`; componentize-py then names each module after its package.
        from wit_world.imports import reconciler_api_types as wit  # type: ignore[no-redef]
    GENERATED = True
    """Whether componentize-py's bindings are importable: always in a component."""
    Level, EventType = wit_log.Level, wit_cluster.EventType
except ModuleNotFoundError as missing:
    if missing.name not in ("componentize_py_types", "wit_world"):
        raise
    GENERATED = False
    from enum import Enum

    class Err(Exception):  # type: ignore[no-redef]
        """Stands in for `componentize_py_types.Err`, which nothing raises natively."""

    # Stand in for the generated enums, with their names and values.
    class Level(Enum):  # type: ignore[no-redef]
        TRACE, DEBUG, INFO, WARN, ERROR = range(5)

    class EventType(Enum):  # type: ignore[no-redef]
        NORMAL, WARNING = range(2)


from .errors import (
    ConflictError,
    DeniedError,
    HostError,
    InvalidError,
    NotFoundError,
    OtherError,
    PermanentError,
    ReconcileError,
    UnavailableError,
)
from .manifest import (
    ComputedIndex,
    FieldIndex,
    Function,
    Label,
    Manifest,
    Owner,
    OwnerLabels,
    Watch,
)
from .objects import Action, Gvk, ObjectKey, ObjectRef, Request, millis

T = TypeVar("T")


def call(function: Callable[..., T], *args: Any) -> T:
    """Calls a generated import, raising its `Err` as the matching `HostError`."""
    try:
        return function(*args)
    except Err as e:
        host_error = _HOST_ERRORS.get(type(e.value), OtherError)
        raise host_error(str(getattr(e.value, "value", e.value))) from None


def dumps(value: Any) -> str:
    """Compact JSON text, non-ASCII kept as is (the WIT's strings are UTF-8); `InvalidError`
    when `value` does not serialise."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise InvalidError(f"the object does not serialise to JSON: {e}") from None


def parse(text: str, what: str) -> Any:
    """JSON text from the host, parsed; `OtherError` when it is not JSON (a host bug: retry)."""
    try:
        return json.loads(text)
    except ValueError as e:
        raise OtherError(f"{what}: the host returned text that is not JSON: {e}") from None


class WitHost:
    """The host of a component: each method is one generated import, its `Err` raised as a
    `HostError`."""

    def get(self, r: ObjectRef) -> str | None:
        return call(wit_lister.get, ref(r))

    def list(self, kind: Gvk, namespace: str | None, label_selector: str | None) -> list[str]:
        return call(wit_lister.list, gvk(kind), namespace, label_selector)

    def patch_status(self, r: ObjectRef, patch: str) -> str:
        return call(wit_cluster.patch_status, ref(r), patch)

    def apply(self, obj: str) -> str:
        return call(wit_cluster.apply, obj)

    def apply_with(self, obj: str, force: bool) -> str:
        return call(wit_cluster.apply_with, obj, wit_cluster.ApplyOptions(force=force))

    def delete(self, r: ObjectRef) -> bool:
        return call(wit_cluster.delete, ref(r))

    def record_event(self, regarding: ObjectRef, event_type: Any, reason: str, message: str):
        event = wit_cluster.Event(ref(regarding), event_type, reason, message)
        call(wit_cluster.record_event, event)

    def enqueue(self, k: ObjectKey, after_ms: int | None) -> None:
        call(wit_queue.enqueue, key(k), after_ms)

    def log(self, level: Any, message: str) -> None:
        wit_log.log(level, message)


class NoHost:
    """Natively, without generated bindings and before a `FakeHost` is active: every host call
    is a mistake of the test's set-up, said as such (not a `HostError` a guest would handle)."""

    def __getattr__(self, function: str) -> Any:
        raise RuntimeError(
            f"reconciler_guest: a host call ({function}) outside a component, with no host to "
            "answer it: run the code under `with reconciler_guest.testing.FakeHost(...)` "
            "(docs/guests/python.md, Testing natively)"
        )


host: Any = WitHost() if GENERATED else NoHost()
"""What the interface modules call; `reconciler_guest.testing.FakeHost` replaces it."""

if GENERATED:
    _HOST_ERRORS: dict[type, type[HostError]] = {
        wit.Error_Denied: DeniedError,
        wit.Error_NotFound: NotFoundError,
        wit.Error_Conflict: ConflictError,
        wit.Error_Invalid: InvalidError,
        wit.Error_Unavailable: UnavailableError,
        wit.Error_Other: OtherError,
    }


def world_exports(interface: str) -> bool | None:
    """Whether the world the bindings were generated for exports `interface` (`watches`,
    `indexes`); `None` natively, without bindings."""
    if not GENERATED:
        return None
    try:
        __import__(f"wit_world.exports.{interface}")
    except ModuleNotFoundError:
        return False
    return True


def gvk(g: Gvk) -> wit.Gvk:
    return wit.Gvk(group=g.group, version=g.version, kind=g.kind)


# The request's ref and the WIT record it came from: most calls name the request's object, and
# handing the host's own record back saves two conversions per call.
_request_ref: tuple[ObjectRef | None, wit.ObjectRef | None] = (None, None)


def ref(r: ObjectRef) -> wit.ObjectRef:
    if r is _request_ref[0]:
        return _request_ref[1]
    return wit.ObjectRef(kind=gvk(r.kind), namespace=r.namespace, name=r.name)


def key(k: ObjectKey) -> wit.ObjectKey:
    return wit.ObjectKey(namespace=k.namespace, name=k.name)


def request(r: wit_reconciler.Request) -> Request:
    global _request_ref
    k = r.ref.kind
    sdk_ref = ObjectRef(Gvk(k.group, k.version, k.kind), r.ref.namespace, r.ref.name)
    _request_ref = (sdk_ref, r.ref)
    return Request(sdk_ref, r.object, r.deleting, r.attempt)


def manifest(m: Manifest) -> wit_reconciler.ControllerManifest:
    return wit_reconciler.ControllerManifest(
        name=m.name,
        primary=gvk(m.primary),
        namespace=m.namespace,
        label_selector=m.label_selector,
        secondary=[
            wit_reconciler.SecondaryWatch(
                kind=gvk(s.kind),
                mapping=wit_reconciler.Mapping_Owner()
                if s.label is None
                else wit_reconciler.Mapping_Label(s.label),
            )
            for s in m.secondary
        ],
        finalizer=m.finalizer,
        concurrency=m.concurrency,
        resync_seconds=m.resync_seconds,
        generation_changed_only=m.generation_changed_only,
    )


def watches(ws: list[Watch]) -> list:
    """The WIT's `watch` records. Imported here, not at the top: only a `watching-controller`
    guest (or an `indexing-controller` one) has the module."""
    from wit_world.exports import watches as wit_watches

    return [
        wit_watches.Watch(
            kind=gvk(w.kind),
            mapping=_mapping(wit_watches, w.mapping),
            namespace=w.namespace,
            label_selector=w.label_selector,
        )
        for w in ws
    ]


def _mapping(wit_watches: Any, m: Any) -> Any:
    if isinstance(m, Owner):
        return wit_watches.WatchMapping_Owner()
    if isinstance(m, Label):
        return wit_watches.WatchMapping_Label(m.label)
    if isinstance(m, OwnerLabels):
        return wit_watches.WatchMapping_OwnerLabels(
            wit_watches.OwnerLabels(namespace=m.namespace, name=m.name)
        )
    if isinstance(m, FieldIndex):
        return wit_watches.WatchMapping_Field(
            # The SDK's IndexValue names its cases as the generated enum does.
            wit_watches.FieldIndex(field=m.field, value=wit_watches.IndexValue[m.value.name])
        )
    if isinstance(m, Function):
        return wit_watches.WatchMapping_Function()
    raise TypeError(f"not a watch mapping: {m!r}")


def computed_indexes(indexes: list[ComputedIndex]) -> list:
    """The WIT's `computed-index` records. Imported here, not at the top: only an
    `indexing-controller` guest has the module."""
    from wit_world.exports import indexes as wit_indexes

    return [
        wit_indexes.ComputedIndex(
            name=i.name,
            kind=gvk(i.kind),
            # The contract's `lookup` has the cases of `index-value`, and the SDK's IndexValue
            # names them as the generated enum does.
            lookup=wit_indexes.Lookup[i.lookup.name],
            namespace=i.namespace,
            label_selector=i.label_selector,
        )
        for i in indexes
    ]


def object_keys(keys: list[ObjectKey]) -> list[wit.ObjectKey]:
    return [key(k) for k in keys]


def action(a: Action | None) -> wit.Action:
    after = None if a is None else a.requeue_after
    return wit.Action(requeue_after_ms=None if after is None else millis(after))


def reconcile_error(e: ReconcileError) -> Err:
    """The `Err` that `reconcile` raises to the host for `e`."""
    if isinstance(e, PermanentError):
        return Err(wit.ReconcileError_Permanent(e.message))
    return Err(wit.ReconcileError_Transient(e.message))
