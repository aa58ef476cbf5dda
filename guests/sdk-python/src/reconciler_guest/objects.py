"""Naming objects (`Gvk`, `ObjectRef`, `ObjectKey`), the `Request` a reconcile gets and the
`Action` it returns.

Pure Python: the binding layer (`_bindings`) converts these to and from the WIT's records.
The names are `NamedTuple`s, not frozen dataclasses: as immutable and hashable, and about twice
as cheap to make, which every reconcile does.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from .errors import PermanentError

Delay = float | timedelta
"""A delay: seconds (`30`, `0.5`) or a `datetime.timedelta`."""

_U64_MAX = 2**64 - 1


def millis(after: Delay) -> int:
    """`after` in whole milliseconds, rounded up (the contract says "not before"), for the WIT."""
    seconds = after.total_seconds() if isinstance(after, timedelta) else after
    if seconds < 0:
        raise ValueError(f"a delay cannot be negative, got {after!r}")
    return min(math.ceil(seconds * 1000), _U64_MAX)


class Gvk(NamedTuple):
    """Group, version and kind of an object: `Gvk("", "v1", "ConfigMap")` (the core group is `""`)."""

    group: str
    version: str
    kind: str

    @classmethod
    def from_api_version(cls, api_version: str, kind: str) -> Gvk:
        """From an object's `apiVersion` (`group/version`, or just `version` for the core group)."""
        group, _, version = api_version.rpartition("/")
        return cls(group, version, kind)

    @property
    def api_version(self) -> str:
        """The `apiVersion` an object of this kind carries."""
        return f"{self.group}/{self.version}" if self.group else self.version


class ObjectKey(NamedTuple):
    """Namespace and name of a primary object: the unit of work of the queue. `namespace` is
    `None` for cluster-scoped kinds."""

    namespace: str | None
    name: str

    def __str__(self) -> str:
        """`namespace/name`, or `name` when cluster-scoped."""
        return f"{self.namespace}/{self.name}" if self.namespace is not None else self.name


class ObjectRef(NamedTuple):
    """Names one object: its kind, namespace (`None` for cluster-scoped kinds) and name."""

    kind: Gvk
    namespace: str | None
    name: str

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ObjectRef | None:
        """Names an object from its JSON (`apiVersion`, `kind`, `metadata.namespace/name`), e.g.
        one `lister.list` returned; `None` when any of those but the namespace is missing."""
        metadata = obj.get("metadata")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not (
            isinstance(metadata, dict) and isinstance(api_version, str) and isinstance(kind, str)
        ):
            return None
        name, namespace = metadata.get("name"), metadata.get("namespace")
        if not isinstance(name, str):
            return None
        return cls(
            Gvk.from_api_version(api_version, kind),
            namespace if isinstance(namespace, str) else None,
            name,
        )

    @property
    def key(self) -> ObjectKey:
        """The queue key of this object."""
        return ObjectKey(self.namespace, self.name)

    def sibling(self, name: str) -> ObjectRef:
        """Another object of the same kind in the same namespace, e.g. to `queue.enqueue` it."""
        return ObjectRef(self.kind, self.namespace, name)

    def __str__(self) -> str:
        """`Kind namespace/name` (or `Kind name` when cluster-scoped), as in log lines."""
        return f"{self.kind.kind} {self.key}"


_UNPARSED = object()


class Request:
    """One reconcile: which object, whether it is being deleted, and the object itself.

    `object` is parsed from the host's JSON on first use only, so a guest that looks only at
    `ref` or `deleting` pays nothing for it.
    """

    ref: ObjectRef
    """The key's object; its kind is the manifest's primary kind."""
    raw: str | None
    """The cached object as the host passed it (JSON text), or `None` when it is gone."""
    deleting: bool
    """The object has a deletion timestamp: clean up external state now."""
    attempt: int
    """0 for the first try of this key since its last success, then 1, 2, ..."""

    def __init__(self, ref: ObjectRef, raw: str | None, deleting: bool = False, attempt: int = 0):
        self.ref, self.raw, self.deleting, self.attempt = ref, raw, deleting, attempt
        self._parsed: Any = None if raw is None else _UNPARSED

    @property
    def key(self) -> ObjectKey:
        """The queue key of the request's object (`namespace/name`)."""
        return self.ref.key

    @property
    def object(self) -> dict[str, Any] | None:
        """The object as a `dict` (parsed once), or `None` when it is gone.

        Raises `PermanentError` when the host passed text that is not a JSON object: retrying
        cannot help.
        """
        # Not functools.cached_property: before Python 3.12 it takes a lock on every first read.
        if self._parsed is _UNPARSED:
            try:
                value = json.loads(self.raw)
            except ValueError as e:
                raise PermanentError(f"{self.ref}: the object is not JSON: {e}") from e
            if not isinstance(value, dict):
                raise PermanentError(f"{self.ref}: the object is not a JSON object")
            self._parsed = value
        return self._parsed

    def __repr__(self) -> str:
        return f"Request({self.ref}, deleting={self.deleting}, attempt={self.attempt})"


@dataclass(frozen=True)
class Action:
    """What to do after a successful reconcile. Returning `None` from `reconcile` is the same
    as `Action.await_change()`."""

    requeue_after: Delay | None = None
    """Reconcile this key again after this delay; `None` = only on change."""

    @classmethod
    def await_change(cls) -> Action:
        """Done; reconcile again only when the object (or a watched secondary) changes, or at
        the manifest's resync interval."""
        return cls()

    @classmethod
    def requeue(cls, after: Delay) -> Action:
        """Done for now; reconcile this key again after `after` (seconds or a `timedelta`),
        e.g. to poll something external."""
        return cls(after)
