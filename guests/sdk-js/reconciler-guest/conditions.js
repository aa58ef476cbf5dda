// `status.conditions` in the `metav1.Condition` shape, kept the way `kubectl wait` and humans
// expect: one entry per type, `lastTransitionTime` moving only when the status flips.
//
// A condition is a plain object: `{type, status: "True" | "False" | "Unknown", reason, message,
// lastTransitionTime, observedGeneration?}`. The time is the host's wall clock (`Date.now()`,
// which the host provides to every guest; the offline runner's `--now`).

/**
 * Now as the API server stores it: RFC 3339, truncated to whole seconds, in UTC
 * (`2026-01-02T03:04:05Z`), so a condition read back compares equal to the one written.
 */
export function now() {
  return new Date(Date.now()).toISOString().slice(0, 19) + "Z";
}

/**
 * A condition stamped with `now()`. `status` is a boolean (`"True"`/`"False"`) or the string
 * itself (`"Unknown"` too).
 * @param {string} type e.g. `Ready`
 * @param {boolean | "True" | "False" | "Unknown"} status
 * @param {string} reason UpperCamelCase, e.g. `Synced`
 * @param {string} message for humans
 * @param {number} [observedGeneration] the object's `metadata.generation` this was computed from
 */
export function make(type, status, reason, message, observedGeneration) {
  const condition = {
    type,
    status: typeof status === "boolean" ? (status ? "True" : "False") : status,
    reason,
    message,
    lastTransitionTime: now(),
  };
  if (observedGeneration !== undefined && observedGeneration !== null) {
    condition.observedGeneration = observedGeneration;
  }
  return condition;
}

/** The condition of `type` in `conditions` (an array, or null/undefined for none), or null. */
export function find(conditions, type) {
  return (conditions ?? []).find((condition) => condition.type === type) ?? null;
}

/** Whether the condition of `type` is present with status `True`. */
export function isTrue(conditions, type) {
  return find(conditions, type)?.status === "True";
}

/**
 * Adds `condition` to the array `conditions`, or updates the entry of the same type in place,
 * like apimachinery's `meta.SetStatusCondition`: `lastTransitionTime` is taken from `condition`
 * only when the status changes; reason, message and observedGeneration always follow it.
 *
 * Returns whether anything changed, so a guest can skip a status write (and an event) when
 * nothing did.
 */
export function set(conditions, condition) {
  const existing = conditions.find((c) => c.type === condition.type);
  if (!existing) {
    conditions.push({ ...condition });
    return true;
  }
  let changed = false;
  if (existing.status !== condition.status) {
    existing.status = condition.status;
    existing.lastTransitionTime = condition.lastTransitionTime;
    changed = true;
  }
  for (const field of ["reason", "message"]) {
    if (existing[field] !== condition[field]) {
      existing[field] = condition[field];
      changed = true;
    }
  }
  const generation = condition.observedGeneration ?? undefined;
  if ((existing.observedGeneration ?? undefined) !== generation) {
    if (generation === undefined) delete existing.observedGeneration;
    else existing.observedGeneration = generation;
    changed = true;
  }
  return changed;
}

/** Removes the condition of `type` from the array; returns whether there was one. */
export function remove(conditions, type) {
  const index = conditions.findIndex((c) => c.type === type);
  if (index < 0) return false;
  conditions.splice(index, 1);
  return true;
}
