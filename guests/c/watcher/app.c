// The test guest `watcher` in C: a port of guests/testing/watcher (the Rust SDK's), with the same
// manifest, watches and map, declared in the C SDK's rg_manifest_t.watches and built for the
// world `watching-controller` (tests/tests/sdk_watches.rs checks that the host reads the same
// watches from every build).
//
// It reconciles `test.reconciler.dev/v1` `Widget`s (guests/testing/widget/crd.yaml): each
// reconcile merges `status.reconciles` (+1) and `status.observedGeneration`. Its watches, one per
// mapping the contract has beyond the manifest's:
//
//   ConfigMap       function (widgets_named_by): the Widgets its annotation
//                   test.reconciler.dev/widgets lists (a,b), in its namespace
//   Secret          field index spec.secretName, name: the Widgets in its namespace naming it
//   Namespace       field index spec.namespaces[*], name: the Widgets anywhere listing it
//   ServiceAccount  owner labels test.reconciler.dev/owner-namespace, -name, selected by the
//                   name label: the Widget the labels name, in any namespace
#include <string.h>

#include "reconciler.h"

// The Widgets a ConfigMap's annotation names (comma-separated), in its namespace.
static bool widgets_named_by(const rg_json_t *config_map, rg_keys_t *keys) {
  const rg_json_t *metadata = rg_json_get(config_map, "metadata");
  const char *names =
      rg_json_string(rg_json_path(metadata, "annotations", "test.reconciler.dev/widgets"));
  const char *namespace = rg_json_string(rg_json_get(metadata, "namespace"));
  while (names != NULL && *names != '\0') {
    size_t len = strcspn(names, ",");
    const char *start = names, *end = names + len;
    while (start < end && *start == ' ') start++;
    while (end > start && end[-1] == ' ') end--;
    if (end > start) rg_keys_add(keys, namespace, rg_strndup(start, (size_t)(end - start)));
    names += len + (names[len] == ',');
  }
  return true;
}

rg_manifest_t manifest(void) {
  return (rg_manifest_t){
      .name = "watcher",
      .primary = {"test.reconciler.dev", "v1", "Widget"},
      .watches =
          {
              {.kind = {"", "v1", "ConfigMap"}, .mapping = RG_MAP_FUNCTION, .map = widgets_named_by},
              {.kind = {"", "v1", "Secret"}, .mapping = RG_MAP_FIELD, .field = "spec.secretName"},
              {.kind = {"", "v1", "Namespace"},
               .mapping = RG_MAP_FIELD,
               .field = "spec.namespaces[*]"},
              {.kind = {"", "v1", "ServiceAccount"},
               .mapping = RG_MAP_OWNER_LABELS,
               .namespace_label = "test.reconciler.dev/owner-namespace",
               .label = "test.reconciler.dev/owner-name",
               .label_selector = "test.reconciler.dev/owner-name"},
          },
  };
}

rg_result_t reconcile(rg_request_t *req) {
  const rg_json_t *widget = rg_request_object(req);
  if (widget == NULL) return rg_await_change();
  int64_t reconciles = 0;
  rg_json_int(rg_json_path(widget, "status", "reconciles"), &reconciles);
  const rg_json_t *generation = rg_json_path(widget, "metadata", "generation");
  const char *patch =
      rg_format("{\"status\":{\"reconciles\":%lld,\"observedGeneration\":%s}}",
                (long long)(reconciles + 1), generation != NULL ? rg_json_serialize(generation) : "null");
  rg_err_t err = rg_cluster_patch_status(&req->ref, patch, NULL);
  if (err != RG_OK) return rg_transient("status write failed: %s: %s", rg_err_name(err), rg_last_error());
  return rg_await_change();
}
