// @ts-check
// The test guest `watcher` in JavaScript: a port of guests/testing/watcher (the Rust SDK's), with
// the same manifest, watches and map, declared with the SDK's defineWatches and built for the
// world `watching-controller` (tests/tests/sdk_watches.rs checks that the host reads the same
// watches from every build).
//
// It reconciles `test.reconciler.dev/v1` `Widget`s (guests/testing/widget/crd.yaml): each
// reconcile merges `status.reconciles` (+1) and `status.observedGeneration`. Its watches, one per
// mapping the contract has beyond the manifest's:
//
//   ConfigMap       function (widgetsNamedBy): the Widgets its annotation
//                   test.reconciler.dev/widgets lists (a,b), in its namespace
//   Secret          field index spec.secretName, name: the Widgets in its namespace naming it
//   Namespace       field index spec.namespaces[*], name: the Widgets anywhere listing it
//   ServiceAccount  owner labels test.reconciler.dev/owner-namespace, -name, selected by the
//                   name label: the Widget the labels name, in any namespace

import { IndexValue, Mapping, cluster, defineReconciler, defineWatches, gvk, transient } from "./reconciler-guest/index.js";

const WIDGETS_ANNOTATION = "test.reconciler.dev/widgets";

export const reconciler = defineReconciler({
  manifest: { name: "watcher", primary: gvk("test.reconciler.dev", "v1", "Widget") },

  reconcile(request) {
    const widget = request.object;
    if (widget === null) return;
    const status = {
      reconciles: (widget.status?.reconciles ?? 0) + 1,
      observedGeneration: widget.metadata?.generation ?? null,
    };
    try {
      cluster.patchStatus(request.ref, status);
    } catch (error) {
      throw transient("status write failed", error);
    }
  },
});

export const watches = defineWatches([
  { kind: gvk("", "v1", "ConfigMap"), mapping: Mapping.function(widgetsNamedBy) },
  { kind: gvk("", "v1", "Secret"), mapping: Mapping.field("spec.secretName", IndexValue.name) },
  { kind: gvk("", "v1", "Namespace"), mapping: Mapping.field("spec.namespaces[*]", IndexValue.name) },
  {
    kind: gvk("", "v1", "ServiceAccount"),
    mapping: Mapping.ownerLabels("test.reconciler.dev/owner-namespace", "test.reconciler.dev/owner-name"),
    labelSelector: "test.reconciler.dev/owner-name",
  },
]);

/**
 * The Widgets a ConfigMap's annotation names, in its namespace; none without the annotation.
 * @param {{[field: string]: any}} configMap
 */
function widgetsNamedBy(configMap) {
  const names = configMap.metadata?.annotations?.[WIDGETS_ANNOTATION];
  if (typeof names !== "string") return [];
  return names
    .split(",")
    .map((name) => name.trim())
    .filter((name) => name !== "")
    .map((name) => ({ namespace: configMap.metadata.namespace, name }));
}
