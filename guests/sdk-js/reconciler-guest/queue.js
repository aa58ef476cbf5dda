// The guest's own work queue: keys of its primary kind.

import { enqueue as hostEnqueue } from "reconciler:api/queue@0.1.0";

import { hostCall } from "./error.js";
import { keyOf } from "./object.js";

/**
 * Adds a key (now, or not before `afterMs` milliseconds, at most 24 h); duplicate adds
 * collapse, and the host never runs two reconciles of one key at once. `key` is a key
 * `{namespace, name}` or an object reference of the primary kind. Throws a HostError.
 * @param {{namespace?: string | null, name: string}} key
 * @param {number} [afterMs]
 */
export function enqueue(key, afterMs) {
  hostCall(() => hostEnqueue(keyOf(key), afterMs == null ? undefined : milliseconds(afterMs)));
}

/**
 * A `u64` of milliseconds as the QuickJS bindings take it: a whole, non-negative Number (a
 * BigInt there traps the instance).
 * @param {number | bigint} ms
 */
export function milliseconds(ms) {
  const n = Math.round(Number(ms));
  return Number.isFinite(n) && n > 0 ? n : 0;
}
