"""`status.conditions` in the `metav1.Condition` shape (plain dicts, as the object's JSON has
them), kept the way `kubectl wait` and humans expect: one entry per type, `lastTransitionTime`
moving only when the status flips.

    conds = status.setdefault("conditions", [])
    if conditions.set(conds, conditions.new("Ready", True, "Synced", "up", generation)):
        cluster.patch_status(request.ref, status)

The time is the host's wall clock (`wasi:clocks/wall-clock`, which every guest gets).
"""

from __future__ import annotations

import time
from typing import Any

Condition = dict[str, Any]
"""`{"type", "status", "reason", "message", "lastTransitionTime"[, "observedGeneration"]}`."""


def now() -> str:
    """Now in RFC 3339 (`2026-01-02T03:04:05Z`), truncated to whole seconds as the API server
    stores it, so a condition read back compares equal to the one written."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(time.time())))


def new(
    type: str,
    status: bool | str,
    reason: str,
    message: str,
    observed_generation: int | None = None,
) -> Condition:
    """A condition stamped with `now()`; `status` is `True`/`False` (or the string `"Unknown"`)."""
    condition: Condition = {
        "type": type,
        "status": ("True" if status else "False") if isinstance(status, bool) else status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now(),
    }
    if observed_generation is not None:
        condition["observedGeneration"] = observed_generation
    return condition


def find(conditions: list[Condition], type: str) -> Condition | None:
    """The condition of `type`, if present."""
    return next((c for c in conditions if c.get("type") == type), None)


def is_true(conditions: list[Condition], type: str) -> bool:
    """Whether the condition of `type` is present with status `True`."""
    found = find(conditions, type)
    return found is not None and found.get("status") == "True"


def remove(conditions: list[Condition], type: str) -> bool:
    """Removes the condition of `type`; returns whether there was one."""
    found = find(conditions, type)
    if found is not None:
        conditions.remove(found)
    return found is not None


def set(conditions: list[Condition], new: Condition) -> bool:
    """Adds `new`, or updates the condition of the same type in place, like apimachinery's
    `meta.SetStatusCondition`: `lastTransitionTime` is taken from `new` only when the status
    changes; reason, message and observed generation always follow `new` (an absent
    `observedGeneration` removes it).

    Returns whether anything changed, so a guest can skip a status write (and an event) when
    nothing did.
    """
    existing = find(conditions, new["type"])
    if existing is None:
        added = dict(new)
        added.setdefault("lastTransitionTime", now())
        conditions.append(added)
        return True
    changed = False
    if existing.get("status") != new.get("status"):
        existing["status"] = new.get("status")
        existing["lastTransitionTime"] = new.get("lastTransitionTime") or now()
        changed = True
    for field in ("reason", "message", "observedGeneration"):
        if existing.get(field) != new.get(field):
            if field in new:
                existing[field] = new[field]
            else:
                del existing[field]
            changed = True
    return changed
