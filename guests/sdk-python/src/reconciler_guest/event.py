"""Kubernetes events about objects, for the humans running `kubectl describe`.

The host aggregates repeats of the same (object, type, reason), so recording on every reconcile
costs little. `normal` and `warning` are best effort: a failure (the guest's event rate, a
missing read grant) is logged as a warning and does not fail the reconcile; use `record` to
handle it yourself.
"""

from __future__ import annotations

from . import _bindings, log
from .errors import HostError
from .objects import ObjectRef

EventType = _bindings.EventType
"""`NORMAL` or `WARNING`."""


def normal(regarding: ObjectRef, reason: str, message: str) -> None:
    """Records a `Normal` event; `reason` is UpperCamelCase, e.g. `Synced`."""
    _best_effort(regarding, EventType.NORMAL, reason, message)


def warning(regarding: ObjectRef, reason: str, message: str) -> None:
    """Records a `Warning` event; `reason` is UpperCamelCase, e.g. `BackendFailed`."""
    _best_effort(regarding, EventType.WARNING, reason, message)


def record(regarding: ObjectRef, event_type: EventType, reason: str, message: str) -> None:
    """Records an event; raises the host's `HostError`, e.g. `DeniedError` when the guest may
    not read `regarding`, `UnavailableError` beyond its event rate."""
    _bindings.host.record_event(regarding, event_type, reason, message)


def _best_effort(regarding: ObjectRef, event_type: EventType, reason: str, message: str) -> None:
    try:
        _bindings.host.record_event(regarding, event_type, reason, message)
    except HostError as e:
        log.warn("could not record event %s on %s: %s", reason, regarding, e)
