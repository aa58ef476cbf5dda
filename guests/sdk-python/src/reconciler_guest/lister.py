"""Reads from the host's informer caches, never from the API server.

Each call copies the object(s) as JSON across the component boundary and parses them into
dicts: cheap for one object, proportional to the result for `list`. Only kinds granted to the
guest are readable; others raise `DeniedError`.
"""

from __future__ import annotations

import builtins
from typing import Any

from . import _bindings
from .objects import Gvk, ObjectRef


def get(ref: ObjectRef) -> dict[str, Any] | None:
    """The cached object, or `None` when it does not exist (or is not cached yet).

    Raises the host's `HostError`.
    """
    text = _bindings.host.get(ref)
    return None if text is None else _bindings.parse(text, str(ref))


def list(
    kind: Gvk, namespace: str | None = None, label_selector: str | None = None
) -> builtins.list[dict[str, Any]]:
    """Cached objects of `kind`, in `namespace` (`None` = all namespaces), matching
    `label_selector` (Kubernetes syntax: `app=web,tier!=db,env in (a,b),!legacy`).

    Raises the host's `HostError` (`InvalidError` for a bad selector).
    """
    texts = _bindings.host.list(kind, namespace, label_selector)
    return [_bindings.parse(text, f"a {kind.kind} from the cache") for text in texts]
