"""Writes to the API server, with the guest's name as field manager.

Each call is one request to the API server (a round trip, not a cache read). After a write the
host's cache shows the returned object at once, so a following `lister.get` reads the guest's
own write. Every function raises the host's `HostError` on failure: `ConflictError`,
`NotFoundError` (the object is gone), `InvalidError` (rejected by the schema), `DeniedError`
(no write grant).
"""

from __future__ import annotations

from typing import Any

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
    returned = _bindings.host.patch_status(ref, patch)
    return _bindings.parse(returned, "the object returned by the status patch")


def patch_status_raw(ref: ObjectRef, patch: str) -> str:
    """Like `patch_status`, with the whole merge patch (`{"status": ...}`) as JSON text, and
    the returned object as the host's JSON text, unparsed."""
    return _bindings.host.patch_status(ref, patch)


def apply(obj: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply (with `apiVersion`, `kind` and `metadata.name`) with the guest as field
    manager, forced: the guest takes every field it sets, from any other manager. It owns the
    fields it sends and nothing else, so send an object of the guest's own whole; on an object
    others manage too (a Deployment kubectl, Helm or an HPA writes), send only the fields the
    guest manages, or use `apply_with` without `force`. Returns the applied object, filtered as
    for `patch_status`. `InvalidError` also when `obj` does not serialise to JSON."""
    returned = _bindings.host.apply(_bindings.dumps(obj))
    return _bindings.parse(returned, "the object returned by apply")


def apply_with(obj: dict[str, Any], *, force: bool = False) -> dict[str, Any]:
    """Server-side apply of the fields the guest manages, as its own field manager: `obj`
    carries `apiVersion`, `kind`, `metadata.name` (and `namespace`) and only the fields the
    guest sets, e.g. one annotation of a Deployment's Pod template. Every other field stays its
    owner's; a field the guest applied before and leaves out now is removed.

    Without `force`, a field another manager owns is a `ConflictError` whose text names the
    field and the manager (the API server's), and nothing is written; raised out of
    `reconcile`, it is retried with backoff until the other manager lets go. `force=True` takes
    the field, as `apply` does. Otherwise as `apply`."""
    returned = _bindings.host.apply_with(_bindings.dumps(obj), force)
    return _bindings.parse(returned, "the object returned by apply")


def delete(ref: ObjectRef) -> bool:
    """Deletes an object; `False` when it was already gone."""
    return _bindings.host.delete(ref)
