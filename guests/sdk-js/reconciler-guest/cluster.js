// Writes to the API server, with the guest's name as field manager.
//
// Each call is one request to the API server (a round trip, not a cache read). After a write
// the host's cache shows the returned object at once, so a following `lister.get` reads the
// guest's own write. Every call throws a HostError when the host or the API server refuses it.

import {
  apply as hostApply,
  applyWith as hostApplyWith,
  delete as hostDelete,
  patchStatus as hostPatchStatus,
} from "reconciler:api/cluster@0.1.0";

import { hostCall } from "./error.js";
import { parse } from "./lister.js";

/**
 * JSON merge patch of the status subresource with `{"status": status}`; returns the object as
 * the API server returned it (parsed; only its identity, `apiVersion`, `kind` and `metadata`'s
 * name, namespace, uid, resourceVersion, generation and timestamps, when the guest may not read
 * the kind). Merge-patch rules apply: fields absent from `status` are left alone, `null`
 * removes a field, and lists (such as `conditions`) are replaced whole. A status patch changes
 * status only: to write labels, annotations or owner references, apply the object.
 *
 * Throws a HostError: `conflict`, `not-found` (object gone), `invalid` (rejected by the
 * schema), `denied` (no status write grant).
 * @param {object} ref the object reference
 * @param {object} status the new status (or the part to change)
 */
export function patchStatus(ref, status) {
  return parse(patchStatusRaw(ref, JSON.stringify({ status })), "the object returned by the status patch");
}

/**
 * Like `patchStatus`, for a merge patch the guest wrote as JSON text itself
 * (`{"status": ...}`); returns the API server's answer as text, unparsed.
 * @param {object} ref
 * @param {string} patch
 */
export function patchStatusRaw(ref, patch) {
  return hostCall(() => hostPatchStatus(ref, patch));
}

/**
 * Server-side apply (an object or its JSON text, with `apiVersion`, `kind` and `metadata.name`)
 * with the guest as field manager, forced: the guest takes every field it sets, from any other
 * manager. It owns the fields it sends and nothing else, so send an object of the guest's own
 * whole; on an object others manage too (a Deployment kubectl, Helm or an HPA writes), send only
 * the fields the guest manages, or use `applyWith` without `force`. Returns the applied object,
 * parsed (filtered as for `patchStatus`).
 * @param {object | string} object
 */
export function apply(object) {
  return parse(hostCall(() => hostApply(jsonText(object))), "the object returned by apply");
}

/**
 * Server-side apply of the fields the guest manages, as its own field manager: `object` (or its
 * JSON text) carries `apiVersion`, `kind`, `metadata.name` (and `namespace`) and only the fields
 * the guest sets, e.g. one annotation of a Deployment's Pod template. Every other field stays
 * its owner's; a field the guest applied before and leaves out now is removed. Without `force`,
 * a field another manager owns is a HostError `conflict` whose text names the field and the
 * manager (the API server's), and nothing is written; thrown out of `reconcile`, it is retried
 * with backoff until the other manager lets go. Otherwise as `apply`.
 * @param {object | string} object
 * @param {{force?: boolean}} [options] `force`: take fields another manager owns (default false)
 */
export function applyWith(object, { force = false } = {}) {
  return parse(hostCall(() => hostApplyWith(jsonText(object), { force })), "the object returned by apply");
}

function jsonText(object) {
  return typeof object === "string" ? object : JSON.stringify(object);
}

/**
 * Deletes an object; false when it was already gone. (`delete` is a reserved word, so it is
 * written `cluster.delete(ref)`, never imported by name.)
 * @param {object} ref
 * @returns {boolean}
 */
function remove(ref) {
  return hostCall(() => hostDelete(ref));
}

export { remove as delete };
