// Naming objects (kinds, references, keys), reading the object a request carries, and the
// answers of map and index functions.
#include <string.h>

#include "rg_internal.h"

const char *rg_gvk_api_version(rg_gvk_t kind) {
  if (kind.group == NULL || kind.group[0] == '\0') return kind.version;
  return rg_format("%s/%s", kind.group, kind.version);
}

bool rg_ref_from_json(const rg_json_t *object, rg_ref_t *ref) {
  const char *api_version = rg_json_string(rg_json_get(object, "apiVersion"));
  const char *kind = rg_json_string(rg_json_get(object, "kind"));
  const char *name = rg_json_string(rg_json_path(object, "metadata", "name"));
  if (api_version == NULL || kind == NULL || name == NULL) return false;
  const char *slash = strchr(api_version, '/');
  *ref = (rg_ref_t){
      .kind = {slash != NULL ? rg_strndup(api_version, (size_t)(slash - api_version)) : "",
               slash != NULL ? slash + 1 : api_version, kind},
      .namespace = rg_json_string(rg_json_path(object, "metadata", "namespace")),
      .name = name,
  };
  return true;
}

const rg_json_t *rg_request_object(rg_request_t *req) {
  if (req->parsed_ == NULL && req->object_json != NULL) {
    // In place: the request's buffer outlives the call's arena (bindings.c frees it after).
    req->parsed_ = rg_json_parse_in_place(req->object_json, req->object_json_len);
    if (req->parsed_ == NULL) {
      rg_fatal(rg_format("the host passed %s %s/%s as text that is %s", req->ref.kind.kind,
                         req->ref.namespace != NULL ? req->ref.namespace : "", req->ref.name,
                         rg_last_error()));
    }
  }
  return req->parsed_;
}

rg_key_t rg_request_key(const rg_request_t *req) {
  return (rg_key_t){.namespace = req->ref.namespace, .name = req->ref.name};
}

static bool same(const char *a, const char *b) {
  return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

void rg_keys_add(rg_keys_t *keys, const char *namespace, const char *name) {
  if (name == NULL) name = "";
  // Linear: a map function gives a few keys (the host takes at most 1,000).
  for (size_t i = 0; i < keys->len; i++) {
    if (same(keys->items[i].namespace, namespace) && strcmp(keys->items[i].name, name) == 0) return;
  }
  if (keys->len == keys->cap) {
    size_t cap = keys->cap > 0 ? keys->cap * 2 : 8;
    rg_key_t *items = rg_alloc(cap * sizeof *items);
    if (keys->len > 0) memcpy(items, keys->items, keys->len * sizeof *items);
    keys->items = items;  // the old array stays in the arena until the call returns
    keys->cap = cap;
  }
  keys->items[keys->len++] = (rg_key_t){
      .namespace = namespace != NULL ? rg_strndup(namespace, strlen(namespace)) : NULL,
      .name = rg_strndup(name, strlen(name)),
  };
}

void rg_values_add(rg_values_t *values, const char *value) {
  if (value == NULL) return;
  // Linear: an index function gives a few values (the host keeps at most 100).
  for (size_t i = 0; i < values->len; i++) {
    if (strcmp(values->items[i], value) == 0) return;
  }
  if (values->len == values->cap) {
    size_t cap = values->cap > 0 ? values->cap * 2 : 8;
    const char **items = rg_alloc(cap * sizeof *items);
    if (values->len > 0) memcpy(items, values->items, values->len * sizeof *items);
    values->items = items;  // the old array stays in the arena until the call returns
    values->cap = cap;
  }
  values->items[values->len++] = rg_strndup(value, strlen(value));
}
