"""The guest's own work queue: keys of its primary kind."""

from __future__ import annotations

from . import _bindings
from .objects import Delay, ObjectKey, ObjectRef, millis


def enqueue(key: ObjectKey | ObjectRef, after: Delay | None = None) -> None:
    """Adds a key (or an object's key) to the queue, now or not before `after` (seconds or a
    `timedelta`, at most 24 h). Duplicate adds collapse, and the host never runs two
    reconciles of one key at once.

    Raises the host's `HostError`: `InvalidError` for a namespace outside the guest's watch,
    `UnavailableError` when 10,000 keys are already waiting.
    """
    if isinstance(key, ObjectRef):
        key = key.key
    _bindings.host.enqueue(key, None if after is None else millis(after))
