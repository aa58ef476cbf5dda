"""Writes to the API server, with the guest's name as field manager.

Each call is one request to the API server (a round trip, not a cache read). After a write the
host's cache shows the returned object at once, so a following `lister.get` reads the guest's
own write. Every function raises the host's `HostError` on failure: `ConflictError`,
`NotFoundError` (the object is gone), `InvalidError` (rejected by the schema), `DeniedError`
(no write grant).
"""

from __future__ import annotations

from typing import Any

from wit_world.imports import cluster as _wit

from . import _bindings
from .objects import ObjectRef


def patch_status(ref: ObjectRef, status: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch of the status subresource with `{"status": status}`; returns the object
    as the API server returned it (only its identity, `apiVersion`, `kind` and `metadata`'s
    name, namespace, uid, resourceVersion, generation and timestamps, when the guest's grant
    does not let it read the kind). A status patch changes status only: to write labels,
    annotations or owner references, `apply` the object.

    Merge-patch rules apply: fields absent from `status` are left alone, `None` removes a
    field, and lists (such as `conditions`) are replaced whole.
    """
    patch = _bindings.dumps({"status": status})
    returned = _bindings.call(_wit.patch_status, _bindings.ref(ref), patch)
    return _bindings.parse(returned, "the object returned by the status patch")


def patch_status_raw(ref: ObjectRef, patch: str) -> str:
    """Like `patch_status`, with the whole merge patch (`{"status": ...}`) as JSON text, and
    the returned object as the host's JSON text, unparsed."""
    return _bindings.call(_wit.patch_status, _bindings.ref(ref), patch)


def apply(obj: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply of a whole object (with `apiVersion`, `kind` and `metadata.name`), the
    guest owning every field it sets; returns the applied object, filtered as for
    `patch_status`. `InvalidError` also when `obj` does not serialise to JSON."""
    returned = _bindings.call(_wit.apply, _bindings.dumps(obj))
    return _bindings.parse(returned, "the object returned by apply")


def delete(ref: ObjectRef) -> bool:
    """Deletes an object; `False` when it was already gone."""
    return _bindings.call(_wit.delete, _bindings.ref(ref))
