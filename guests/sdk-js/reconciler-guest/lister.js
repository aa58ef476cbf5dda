// Reads from the host's informer caches (never from the API server).
//
// Each call copies the object(s) as JSON across the component boundary and parses them: cheap
// for one object, proportional to the result for `list`. Only kinds granted to the guest are
// readable; others fail with `denied`.

import { get as hostGet, list as hostList } from "reconciler:api/lister@0.1.0";

import { HostError, hostCall } from "./error.js";
import { describe, selector } from "./object.js";

/**
 * The cached object (parsed), or null when it does not exist or is not cached yet. Throws a
 * HostError.
 * @param {{kind: object, namespace?: string | null, name: string}} ref
 */
export function get(ref) {
  const json = hostCall(() => hostGet(ref));
  return json == null ? null : parse(json, describe(ref));
}

/**
 * Cached objects of `kind` (parsed), in `namespace` (omitted: all namespaces) matching
 * `labelSelector` (a string in the Kubernetes syntax, e.g. `app=web,tier!=db`, or
 * `{label: value}`). Throws a HostError (`invalid` for a bad selector).
 * @param {{group: string, version: string, kind: string}} kind
 * @param {{namespace?: string | null, labelSelector?: string | Record<string, string>}} [options]
 */
export function list(kind, { namespace, labelSelector } = {}) {
  const texts = hostCall(() =>
    hostList(kind, namespace ?? undefined, labelSelector == null ? undefined : selector(labelSelector)),
  );
  return texts.map((json) => parse(json, `a ${kind.kind} from the cache`));
}

/** JSON text from the host, parsed; a HostError `other` when it is not JSON. */
export function parse(json, what) {
  try {
    return JSON.parse(json);
  } catch (error) {
    throw new HostError("other", `${what} is not JSON: ${error.message}`);
  }
}
