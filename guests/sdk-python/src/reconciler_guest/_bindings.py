"""The binding layer: converts between the SDK's types and the records componentize-py
generates from the WIT (`wit_world`, `componentize_py_types`), and turns an import's `Err`
into a `HostError`. With `lister`, `cluster`, `event`, `queue`, `log`, `network_backend` and
`guest`, the only code that touches the bindings; everything else is plain Python.

The generated import functions are looked up at each call (`module.function`), never bound at
import time, so the native tests can replace them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from componentize_py_types import Err
from wit_world.exports import reconciler as wit_reconciler

try:
    from wit_world.imports import types as wit
except ImportError:
    # A world that also imports wasi:http (`http-controller`) has two interfaces named `types`;
    # componentize-py then names each module after its package.
    from wit_world.imports import reconciler_api_types as wit  # type: ignore[no-redef]

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

_HOST_ERRORS: dict[type, type[HostError]] = {
    wit.Error_Denied: DeniedError,
    wit.Error_NotFound: NotFoundError,
    wit.Error_Conflict: ConflictError,
    wit.Error_Invalid: InvalidError,
    wit.Error_Unavailable: UnavailableError,
    wit.Error_Other: OtherError,
}


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
    guest has the module."""
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


def object_keys(keys: Any) -> list[wit.ObjectKey]:
    """`map`'s answer for the host: `ObjectKey`s, or `ObjectRef`s standing for their keys."""
    if not isinstance(keys, (list, tuple)):
        raise TypeError(f"map() must return a list of ObjectKey or ObjectRef, not {keys!r}")
    out = []
    for k in keys:
        if isinstance(k, ObjectRef):
            k = k.key
        if not isinstance(k, ObjectKey):
            raise TypeError(f"map() must return ObjectKeys or ObjectRefs, not {k!r}")
        out.append(key(k))
    return out


def action(a: Action | None) -> wit.Action:
    after = None if a is None else a.requeue_after
    return wit.Action(requeue_after_ms=None if after is None else millis(after))


def reconcile_error(e: ReconcileError) -> Err:
    """The `Err` that `reconcile` raises to the host for `e`."""
    if isinstance(e, PermanentError):
        return Err(wit.ReconcileError_Permanent(e.message))
    return Err(wit.ReconcileError_Transient(e.message))
