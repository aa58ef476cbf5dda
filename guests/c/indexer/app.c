// The test guest `indexer` in C: the C SDK's computed indexes (rg_manifest_t.indexes, the world
// `indexing-controller`) in a component, and the fake host's native tests of one (tests/).
//
// It reconciles `test.reconciler.dev/v1` `Widget`s (guests/testing/widget/crd.yaml). A Widget
// names the ConfigMaps of its namespace it reads in its annotation test.reconciler.dev/configmaps
// ("a, b"), the pattern of config-reloader (docs/examples/config-reloader.md): no field path
// reaches a name inside that string, so the computed index `configmaps` does. The host calls
// configmaps_of when a Widget is added or changes, keeps its names, and looks each ConfigMap event
// up among them: a change of ConfigMap `a` reconciles the Widgets of its namespace that list it,
// with no guest call per ConfigMap event.
//
// Each reconcile reads the listed ConfigMaps from the cache and writes `status.configMaps`
// ("NAME=VALUE", the ConfigMap's `data.value`, for each one that exists, in the annotation's
// order) and `status.missing` (the names that do not exist).
#include <string.h>

#include "reconciler.h"

#define LIST_ANNOTATION "test.reconciler.dev/configmaps"

static const rg_gvk_t config_map = {"", "v1", "ConfigMap"};

// The next name of a comma-separated list at *cursor, trimmed, into *name (NULL at the end);
// empty entries are skipped.
static bool next_name(const char **cursor, const char **name) {
  const char *p = *cursor;
  while (p != NULL && *p != '\0') {
    size_t len = strcspn(p, ",");
    const char *start = p, *end = p + len;
    p += len + (p[len] == ',');
    while (start < end && *start == ' ') start++;
    while (end > start && end[-1] == ' ') end--;
    if (end > start) {
      *cursor = p;
      *name = rg_strndup(start, (size_t)(end - start));
      return true;
    }
  }
  *name = NULL;
  return false;
}

static const char *list_of(const rg_json_t *widget) {
  return rg_json_string(rg_json_path(widget, "metadata", "annotations", LIST_ANNOTATION));
}

// The index `configmaps`: the ConfigMap names a Widget's annotation lists, each once.
static bool configmaps_of(const rg_json_t *widget, rg_values_t *values) {
  const char *cursor = list_of(widget), *name;
  while (next_name(&cursor, &name)) rg_values_add(values, name);
  return true;
}

rg_manifest_t manifest(void) {
  return (rg_manifest_t){
      .name = "indexer",
      .primary = {"test.reconciler.dev", "v1", "Widget"},
      .indexes = {{.name = "configmaps", .kind = config_map, .index = configmaps_of}},
  };
}

rg_result_t reconcile(rg_request_t *req) {
  const rg_json_t *widget = rg_request_object(req);
  if (widget == NULL) return rg_await_change();
  const char *found = "", *missing = "", *cursor = list_of(widget), *name;
  while (next_name(&cursor, &name)) {
    const rg_json_t *object = NULL;
    rg_err_t err = rg_lister_get(&(rg_ref_t){config_map, req->ref.namespace, name}, &object);
    if (err != RG_OK) return rg_from_error(err, "reading ConfigMap %s", name);
    const char *value = rg_json_string(rg_json_path(object, "data", "value"));
    if (object == NULL) {
      missing = rg_format("%s%s%s", missing, *missing ? "," : "", rg_json_quote(name));
    } else {
      found = rg_format("%s%s%s", found, *found ? "," : "",
                        rg_json_quote(rg_format("%s=%s", name, value != NULL ? value : "")));
    }
  }
  const char *patch =
      rg_format("{\"status\":{\"configMaps\":[%s],\"missing\":[%s]}}", found, missing);
  rg_err_t err = rg_cluster_patch_status(&req->ref, patch, NULL);
  if (err != RG_OK) return rg_from_error(err, "writing the status");
  return rg_await_change();
}
