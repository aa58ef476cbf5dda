// @ts-check
// The test guest `indexer` in JavaScript: a computed index (the SDK's defineIndexes), built for
// the world `indexing-controller` (its `wit-world`). It exports `indexes` and no `watches`: the
// build then leaves `watches` out of its world, as the Rust SDK's `export_indexing!` does.
//
// It reconciles `test.reconciler.dev/v1` `Widget`s (guests/testing/widget/crd.yaml) that list
// ConfigMaps of their namespace in the annotation `test.reconciler.dev/configmaps: "a, b"`: each
// reconcile writes `status.configMaps`, every listed name with the resourceVersion of that
// ConfigMap (null while there is none), and `status.observedGeneration`, and writes nothing when
// that is already the status.
//
// Its index `configmaps` holds the names each Widget lists: an event of a ConfigMap wakes the
// Widgets of its namespace among whose values its name is, looked up in the host's memory, with
// no guest call per event. A field index cannot say this, the names being one string.

import { cluster, defineIndexes, defineReconciler, gvk, IndexValue, lister, objectRef, transient } from "./reconciler-guest/index.js";

const CONFIG_MAPS_ANNOTATION = "test.reconciler.dev/configmaps";
const CONFIG_MAP = gvk("", "v1", "ConfigMap");

export const reconciler = defineReconciler({
  manifest: { name: "indexer", primary: gvk("test.reconciler.dev", "v1", "Widget") },

  reconcile(request) {
    const widget = request.object;
    if (widget === null) return;
    const status = {
      configMaps: configMapsOf(widget).map((name) => ({
        name,
        resourceVersion: lister.get(objectRef(CONFIG_MAP, request.namespace, name))?.metadata?.resourceVersion ?? null,
      })),
      observedGeneration: widget.metadata?.generation ?? null,
    };
    const current = widget.status ?? {};
    if (same(current.configMaps, status.configMaps) && current.observedGeneration === status.observedGeneration) return;
    try {
      cluster.patchStatus(request.ref, status);
    } catch (error) {
      throw transient("status write failed", error);
    }
  },
});

export const indexes = defineIndexes([{ name: "configmaps", kind: CONFIG_MAP, lookup: IndexValue.name, index: configMapsOf }]);

/**
 * The ConfigMap names a Widget's annotation lists, trimmed, each once, in its order; none
 * without the annotation.
 * @param {{[field: string]: any}} widget
 * @returns {string[]}
 */
function configMapsOf(widget) {
  const names = widget.metadata?.annotations?.[CONFIG_MAPS_ANNOTATION];
  if (typeof names !== "string") return [];
  return [...new Set(names.split(",").map((name) => name.trim()))].filter((name) => name !== "");
}

/**
 * Whether two JSON values are equal, whatever the order of their objects' keys (the API server
 * need not keep the order the guest wrote).
 * @param {unknown} a
 * @param {unknown} b
 * @returns {boolean}
 */
function same(a, b) {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null || Array.isArray(a) !== Array.isArray(b)) {
    return false;
  }
  const keys = Object.keys(a);
  return (
    keys.length === Object.keys(b).length &&
    keys.every((key) => Object.hasOwn(b, key) && same(/** @type {any} */ (a)[key], /** @type {any} */ (b)[key]))
  );
}
