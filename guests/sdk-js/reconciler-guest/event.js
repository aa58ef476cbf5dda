// Kubernetes events about objects, for the humans running `kubectl describe`.
//
// The host aggregates repeats of the same (object, type, reason), so recording on every
// reconcile costs little. `normal` and `warning` are best effort: a failure is logged and does
// not fail the reconcile; use `record` to handle it yourself.

import { recordEvent } from "reconciler:api/cluster@0.1.0";

import { HostError, hostCall } from "./error.js";
import { warn } from "./log.js";
import { describe } from "./object.js";

/**
 * Records an event; throws a HostError when the host refuses it (e.g. `denied` when the guest
 * may not read `regarding`, `unavailable` beyond the guest's event rate).
 * @param {object} regarding the object reference
 * @param {"normal" | "warning"} type
 * @param {string} reason UpperCamelCase, e.g. `Synced`
 * @param {string} message for humans
 */
export function record(regarding, type, reason, message) {
  hostCall(() => recordEvent({ regarding, eventType: type, reason, message }));
}

/** Records a `Normal` event, best effort; `reason` is UpperCamelCase, e.g. `Synced`. */
export function normal(regarding, reason, message) {
  bestEffort(regarding, "normal", reason, message);
}

/** Records a `Warning` event, best effort; `reason` is UpperCamelCase, e.g. `BackendFailed`. */
export function warning(regarding, reason, message) {
  bestEffort(regarding, "warning", reason, message);
}

function bestEffort(regarding, type, reason, message) {
  try {
    record(regarding, type, reason, message);
  } catch (error) {
    if (!(error instanceof HostError)) throw error;
    warn(`could not record event ${reason} on ${describe(regarding)}: ${error.message}`);
  }
}
