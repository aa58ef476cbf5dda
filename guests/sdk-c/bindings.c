// The SDK's only contact with the generated bindings (`reconciler-host componentize bindings
// --lang c`, i.e. wit-bindgen's C generator): the exports that call the guest's `manifest` and
// `reconcile` (and, in a world that exports `watches` or `indexes`, answer them from the
// manifest's watches and indexes), and one thin wrapper per import. Everything else in the SDK is
// plain C that the SDK's tests run natively.
//
// Ownership, as the generated code has it: what an export returns (the manifest's strings, an
// error's message) must be malloc'd, because the generated post-return functions free it; the
// request an export receives is ours to free; what an import returns is ours to free; what we
// pass to an import is only read. Only the interface-prefixed names are used here (not the
// world's `<world>_string_t`), so this file builds against any world that includes
// `controller`; lib.sh names the world's header in RG_WORLD_H.
#include <stdlib.h>
#include <string.h>

#include "rg_internal.h"

#ifndef RG_WORLD_H
#define RG_WORLD_H "controller.h"
#endif
#include RG_WORLD_H

typedef reconciler_api_types_json_t wit_string_t;  // the world's string type, by another name

// Whether the world exports `watches` (watching-controller): its header defines the mapping cases.
#ifdef EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_OWNER
#define RG_EXPORTS_WATCHES 1
#else
#define RG_EXPORTS_WATCHES 0
#endif

// Whether the world exports `indexes` (indexing-controller): its header defines the lookup cases.
#ifdef EXPORTS_RECONCILER_API_INDEXES_LOOKUP_NAME
#define RG_EXPORTS_INDEXES 1
#else
#define RG_EXPORTS_INDEXES 0
#endif

// ---------------------------------------------------------------------------------------------
// Between the SDK's types and the WIT's

// Borrowed: the import only reads it.
static wit_string_t borrow(const char *text) {
  return (wit_string_t){(uint8_t *)text, text != NULL ? strlen(text) : 0};
}

static reconciler_api_types_object_ref_t borrow_ref(const rg_ref_t *ref) {
  reconciler_api_types_object_ref_t out = {
      .kind = {borrow(ref->kind.group), borrow(ref->kind.version), borrow(ref->kind.kind)},
      .name = borrow(ref->name),
  };
  if (ref->namespace != NULL) {
    out.namespace_.is_some = true;
    out.namespace_.val = borrow(ref->namespace);
  }
  return out;
}

// malloc'd, for what an export returns (the post-return frees it; it frees nothing of length 0).
static wit_string_t give(const char *text) {
  wit_string_t out = {NULL, text != NULL ? strlen(text) : 0};
  if (out.len > 0) {
    out.ptr = malloc(out.len);
    if (out.ptr == NULL) rg_fatal("out of memory");
    memcpy(out.ptr, text, out.len);
  }
  return out;
}

static rg_gvk_t gvk_of(const reconciler_api_types_gvk_t *kind) {
  return (rg_gvk_t){
      rg_strndup((const char *)kind->group.ptr, kind->group.len),
      rg_strndup((const char *)kind->version.ptr, kind->version.len),
      rg_strndup((const char *)kind->kind.ptr, kind->kind.len),
  };
}

// rg_err_t follows the cases of the WIT's `error` from RG_DENIED on.
_Static_assert(RECONCILER_API_TYPES_ERROR_DENIED + 1 == RG_DENIED &&
                   RECONCILER_API_TYPES_ERROR_NOT_FOUND + 1 == RG_NOT_FOUND &&
                   RECONCILER_API_TYPES_ERROR_CONFLICT + 1 == RG_CONFLICT &&
                   RECONCILER_API_TYPES_ERROR_INVALID + 1 == RG_INVALID &&
                   RECONCILER_API_TYPES_ERROR_UNAVAILABLE + 1 == RG_UNAVAILABLE &&
                   RECONCILER_API_TYPES_ERROR_OTHER + 1 == RG_OTHER,
               "rg_err_t no longer follows the WIT's error variant");
_Static_assert(RECONCILER_API_LOG_LEVEL_TRACE == RG_LOG_TRACE &&
                   RECONCILER_API_LOG_LEVEL_ERROR == RG_LOG_ERROR,
               "rg_level_t no longer follows the WIT's log level");

// The host's error as the last error (its text copied into the arena), freed.
static rg_err_t take_error(reconciler_api_types_error_t *err) {
  rg_err_t kind =
      err->tag <= RECONCILER_API_TYPES_ERROR_OTHER ? (rg_err_t)(err->tag + 1) : RG_OTHER;
  rg_fail(kind, (const char *)err->val.other.ptr, err->val.other.len);
  reconciler_api_types_error_free(err);
  return kind;
}

// JSON the host returned: parsed when wanted (the tree points into the buffer, which the arena
// then adopts), else freed.
static const rg_json_t *take_json(wit_string_t *json, bool wanted, const char *what) {
  if (!wanted) {
    reconciler_api_types_json_free(json);
    return NULL;
  }
  const rg_json_t *value = rg_json_parse_in_place((const char *)json->ptr, json->len);
  if (value == NULL)
    rg_fatal(rg_format("the host returned %s as text that is %s", what, rg_last_error()));
  if (json->len > 0) rg_arena_adopt(json->ptr);  // (of length 0 it is not the allocator's)
  return value;
}

_Noreturn void rg_fatal(const char *message) {
  wit_string_t text = borrow(message);
  reconciler_api_log_log(RECONCILER_API_LOG_LEVEL_ERROR, &text);
  abort();
}

// ---------------------------------------------------------------------------------------------
// Exports

static size_t count_watches(const rg_manifest_t *m) {
  size_t count = 0;
  for (size_t i = 0; i < RG_MAX_WATCHES; i++) count += m->watches[i].kind.kind != NULL;
  return count;
}

// Whether an entry of .indexes is set at all (any of its name, kind and function): a partly set
// one is a mistake the `indexes` export names, not an entry to skip.
static bool index_is_set(const rg_index_t *x) {
  return x->name != NULL || x->kind.kind != NULL || x->index != NULL;
}

static size_t count_indexes(const rg_manifest_t *m) {
  size_t count = 0;
  for (size_t i = 0; i < RG_MAX_INDEXES; i++) count += index_is_set(&m->indexes[i]);
  return count;
}

void exports_reconciler_api_reconciler_manifest(
    exports_reconciler_api_reconciler_controller_manifest_t *ret) {
  rg_manifest_t m = manifest();
  // Watches or indexes the component cannot export would be lost without a word: refuse to
  // load instead.
  if (!RG_EXPORTS_WATCHES && count_watches(&m) > 0) {
    rg_fatal(rg_format("the manifest declares %zu watches, but this component does not export "
                       "reconciler:api/watches: build it for the world `watching-controller` (a "
                       "`wit-world` file beside the guest's .c files holding that name)",
                       count_watches(&m)));
  }
  if (!RG_EXPORTS_INDEXES && count_indexes(&m) > 0) {
    size_t count = count_indexes(&m);
    rg_fatal(rg_format("the manifest declares %zu computed index%s, but this component does not "
                       "export reconciler:api/indexes: build it for the world "
                       "`indexing-controller` (a `wit-world` file beside the guest's .c files "
                       "holding that name)",
                       count, count == 1 ? "" : "es"));
  }
  *ret = (exports_reconciler_api_reconciler_controller_manifest_t){
      .name = give(m.name),
      .primary = {give(m.primary.group), give(m.primary.version), give(m.primary.kind)},
      .concurrency = m.concurrency,
      .resync_seconds = m.resync_seconds,
      .generation_changed_only = m.generation_changed_only,
  };
  if (m.namespace != NULL) {
    ret->namespace_.is_some = true;
    ret->namespace_.val = give(m.namespace);
  }
  if (m.label_selector != NULL) {
    ret->label_selector.is_some = true;
    ret->label_selector.val = give(m.label_selector);
  }
  if (m.finalizer != NULL) {
    ret->finalizer.is_some = true;
    ret->finalizer.val = give(m.finalizer);
  }
  size_t count = 0;
  for (size_t i = 0; i < RG_MAX_SECONDARY; i++) count += m.secondary[i].kind.kind != NULL;
  if (count > 0) {
    ret->secondary.ptr = calloc(count, sizeof *ret->secondary.ptr);
    if (ret->secondary.ptr == NULL) rg_fatal("out of memory");
    for (size_t i = 0; i < RG_MAX_SECONDARY; i++) {
      const rg_secondary_t *s = &m.secondary[i];
      if (s->kind.kind == NULL) continue;
      exports_reconciler_api_reconciler_secondary_watch_t *out =
          &ret->secondary.ptr[ret->secondary.len++];
      out->kind = (reconciler_api_types_gvk_t){give(s->kind.group), give(s->kind.version),
                                               give(s->kind.kind)};
      out->mapping.tag = EXPORTS_RECONCILER_API_RECONCILER_MAPPING_OWNER;
      if (s->label != NULL) {
        out->mapping.tag = EXPORTS_RECONCILER_API_RECONCILER_MAPPING_LABEL;
        out->mapping.val.label = give(s->label);
      }
    }
  }
  rg_arena_free();
}

bool exports_reconciler_api_reconciler_reconcile(
    exports_reconciler_api_reconciler_request_t *request,
    exports_reconciler_api_reconciler_action_t *ret,
    exports_reconciler_api_reconciler_reconcile_error_t *err) {
  rg_request_t req = {
      .ref =
          {
              .kind = gvk_of(&request->ref.kind),
              .name = rg_strndup((const char *)request->ref.name.ptr, request->ref.name.len),
          },
      .deleting = request->deleting,
      .attempt = request->attempt,
  };
  if (request->ref.namespace_.is_some) {
    wit_string_t *ns = &request->ref.namespace_.val;
    req.ref.namespace = rg_strndup((const char *)ns->ptr, ns->len);
  }
  if (request->object.is_some) {
    // NUL-terminated in place (one byte more of the host's buffer, which we free below) rather
    // than copied: the object is the one large thing a request carries.
    wit_string_t *object = &request->object.val;
    if (object->len > 0) {
      uint8_t *text = realloc(object->ptr, object->len + 1);
      if (text == NULL) rg_fatal("out of memory");
      text[object->len] = '\0';
      object->ptr = text;
      req.object_json = (const char *)text;
    } else {
      req.object_json = "";
    }
    req.object_json_len = object->len;
  }

  rg_result_t result = reconcile(&req);

  bool ok = result.kind == RG_RESULT_OK;
  if (ok) {
    ret->requeue_after_ms.is_some = result.requeue;
    ret->requeue_after_ms.val = result.requeue_after_ms;
  } else {
    err->tag = result.kind == RG_RESULT_PERMANENT ? RECONCILER_API_TYPES_RECONCILE_ERROR_PERMANENT
                                                  : RECONCILER_API_TYPES_RECONCILE_ERROR_TRANSIENT;
    err->val.transient = give(result.message != NULL ? result.message : "");
  }
  exports_reconciler_api_reconciler_request_free(request);
  rg_arena_free();
  return ok;
}

#if RG_EXPORTS_WATCHES || RG_EXPORTS_INDEXES
static void give_option(bool *is_some, wit_string_t *val, const char *text) {
  *is_some = text != NULL;
  if (text != NULL) *val = give(text);
}

// "Kind ns/name" of an object being mapped or indexed, for a trap's message.
static const char *describe(rg_gvk_t kind, const rg_json_t *object) {
  rg_ref_t ref = {.kind = kind, .name = ""};
  rg_ref_from_json(object, &ref);
  return rg_format("%s %s%s%s", kind.kind, ref.namespace != NULL ? ref.namespace : "",
                   ref.namespace != NULL ? "/" : "", ref.name);
}
#endif

#if RG_EXPORTS_WATCHES
// What a watch lacks for its mapping, or NULL when it is complete.
static const char *incomplete(const rg_watch_t *w) {
  switch (w->mapping) {
    case RG_MAP_OWNER:
      return NULL;
    case RG_MAP_LABEL:
    case RG_MAP_OWNER_LABELS:
      return w->label == NULL ? "no .label" : NULL;
    case RG_MAP_FIELD:
      if (w->field == NULL) return "no .field";
      return w->value > RG_INDEX_NAMESPACED_NAME ? "a .value that is no rg_index_value_t" : NULL;
    case RG_MAP_FUNCTION:
      return w->map == NULL ? "no .map function" : NULL;
  }
  return "a .mapping that is no rg_mapping_t";
}

void exports_reconciler_api_watches_watches(exports_reconciler_api_watches_list_watch_t *ret) {
  rg_manifest_t m = manifest();
  *ret = (exports_reconciler_api_watches_list_watch_t){0};
  size_t count = count_watches(&m);
  if (count > 0) {
    ret->ptr = calloc(count, sizeof *ret->ptr);
    if (ret->ptr == NULL) rg_fatal("out of memory");
  }
  for (size_t i = 0; i < RG_MAX_WATCHES; i++) {
    const rg_watch_t *w = &m.watches[i];
    if (w->kind.kind == NULL) continue;
    const char *lacks = incomplete(w);
    if (lacks != NULL) {
      rg_fatal(rg_format("watches[%zu] (%s) has %s for its mapping %d", i, w->kind.kind, lacks,
                         (int)w->mapping));
    }
    exports_reconciler_api_watches_watch_t *out = &ret->ptr[ret->len++];
    out->kind = (reconciler_api_types_gvk_t){give(w->kind.group), give(w->kind.version),
                                             give(w->kind.kind)};
    // rg_mapping_t and rg_index_value_t follow the WIT's cases (the _Static_asserts below).
    out->mapping.tag = (uint8_t)w->mapping;
    if (w->mapping == RG_MAP_LABEL) out->mapping.val.label = give(w->label);
    if (w->mapping == RG_MAP_OWNER_LABELS) {
      exports_reconciler_api_watches_owner_labels_t *labels = &out->mapping.val.owner_labels;
      give_option(&labels->namespace_.is_some, &labels->namespace_.val, w->namespace_label);
      labels->name = give(w->label);
    }
    if (w->mapping == RG_MAP_FIELD) {
      out->mapping.val.field.field = give(w->field);
      out->mapping.val.field.value = (exports_reconciler_api_watches_index_value_t)w->value;
    }
    give_option(&out->namespace_.is_some, &out->namespace_.val, w->namespace);
    give_option(&out->label_selector.is_some, &out->label_selector.val, w->label_selector);
  }
  rg_arena_free();
}

_Static_assert(EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_OWNER == RG_MAP_OWNER &&
                   EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_LABEL == RG_MAP_LABEL &&
                   EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_OWNER_LABELS ==
                       RG_MAP_OWNER_LABELS &&
                   EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_FIELD == RG_MAP_FIELD &&
                   EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_FUNCTION == RG_MAP_FUNCTION,
               "rg_mapping_t no longer follows the WIT's watch-mapping variant");
_Static_assert(EXPORTS_RECONCILER_API_WATCHES_INDEX_VALUE_NAME == RG_INDEX_NAME &&
                   EXPORTS_RECONCILER_API_WATCHES_INDEX_VALUE_NAMESPACE == RG_INDEX_NAMESPACE &&
                   EXPORTS_RECONCILER_API_WATCHES_INDEX_VALUE_NAMESPACED_NAME ==
                       RG_INDEX_NAMESPACED_NAME,
               "rg_index_value_t no longer follows the WIT's index-value enum");

static bool same_kind(rg_gvk_t a, rg_gvk_t b) {
  return strcmp(a.group != NULL ? a.group : "", b.group) == 0 &&
         strcmp(a.version != NULL ? a.version : "", b.version) == 0 &&
         strcmp(a.kind, b.kind) == 0;
}

void exports_reconciler_api_watches_map(exports_reconciler_api_watches_gvk_t *kind,
                                        exports_reconciler_api_watches_json_t *object,
                                        exports_reconciler_api_watches_list_object_key_t *ret) {
  rg_gvk_t k = gvk_of(kind);
  exports_reconciler_api_watches_gvk_free(kind);
  const rg_json_t *value = take_json(object, true, "the object to map");
  rg_manifest_t m = manifest();
  rg_keys_t keys = {0};
  bool mapped = false;
  for (size_t i = 0; i < RG_MAX_WATCHES; i++) {
    const rg_watch_t *w = &m.watches[i];
    if (w->kind.kind == NULL || w->mapping != RG_MAP_FUNCTION || w->map == NULL ||
        !same_kind(w->kind, k))
      continue;
    mapped = true;
    if (!w->map(value, &keys)) {
      rg_fatal(rg_format("map %s: the map function of watches[%zu] failed", describe(k, value), i));
    }
  }
  if (!mapped) {
    rg_warn("map was called for %s %s, which no RG_MAP_FUNCTION watch declares: no keys", k.kind,
            rg_gvk_api_version(k));
  }
  *ret = (exports_reconciler_api_watches_list_object_key_t){0};
  if (keys.len > 0) {
    ret->ptr = calloc(keys.len, sizeof *ret->ptr);
    if (ret->ptr == NULL) rg_fatal("out of memory");
  }
  for (size_t i = 0; i < keys.len; i++) {
    reconciler_api_types_object_key_t *out = &ret->ptr[ret->len++];
    give_option(&out->namespace_.is_some, &out->namespace_.val, keys.items[i].namespace);
    out->name = give(keys.items[i].name);
  }
  rg_arena_free();
}
#endif

#if RG_EXPORTS_INDEXES
// The generator names list<string> after the world (`<world>_list_string_t`), so the `index`
// export's answer is the one type here without an interface-prefixed name. indexing-controller
// is the world that has `indexes`; a world that includes it names its own with
// -DRG_WORLD_LIST_STRING=<world>_list_string_t.
#ifndef RG_WORLD_LIST_STRING
#define RG_WORLD_LIST_STRING indexing_controller_list_string_t
#endif

// What an index lacks, or NULL when it is complete.
static const char *index_lacks(const rg_index_t *x) {
  if (x->name == NULL) return "no .name";
  if (x->kind.kind == NULL) return "no .kind";
  if (x->index == NULL) return "no .index function";
  return x->lookup > RG_LOOKUP_NAMESPACED_NAME ? "a .lookup that is no rg_lookup_t" : NULL;
}

void exports_reconciler_api_indexes_indexes(
    exports_reconciler_api_indexes_list_computed_index_t *ret) {
  rg_manifest_t m = manifest();
  *ret = (exports_reconciler_api_indexes_list_computed_index_t){0};
  size_t count = count_indexes(&m);
  if (count > 0) {
    ret->ptr = calloc(count, sizeof *ret->ptr);
    if (ret->ptr == NULL) rg_fatal("out of memory");
  }
  for (size_t i = 0; i < RG_MAX_INDEXES; i++) {
    const rg_index_t *x = &m.indexes[i];
    if (!index_is_set(x)) continue;
    const char *lacks = index_lacks(x);
    if (lacks != NULL) {
      rg_fatal(rg_format("indexes[%zu] (%s) has %s", i,
                         x->name != NULL ? x->name : x->kind.kind != NULL ? x->kind.kind : "?",
                         lacks));
    }
    exports_reconciler_api_indexes_computed_index_t *out = &ret->ptr[ret->len++];
    out->name = give(x->name);
    out->kind = (reconciler_api_types_gvk_t){give(x->kind.group), give(x->kind.version),
                                             give(x->kind.kind)};
    // rg_lookup_t follows the WIT's cases (the _Static_assert below).
    out->lookup = (exports_reconciler_api_indexes_lookup_t)x->lookup;
    give_option(&out->namespace_.is_some, &out->namespace_.val, x->namespace);
    give_option(&out->label_selector.is_some, &out->label_selector.val, x->label_selector);
  }
  rg_arena_free();
}

_Static_assert(EXPORTS_RECONCILER_API_INDEXES_LOOKUP_NAME == RG_LOOKUP_NAME &&
                   EXPORTS_RECONCILER_API_INDEXES_LOOKUP_NAMESPACE == RG_LOOKUP_NAMESPACE &&
                   EXPORTS_RECONCILER_API_INDEXES_LOOKUP_NAMESPACED_NAME ==
                       RG_LOOKUP_NAMESPACED_NAME,
               "rg_lookup_t no longer follows the WIT's lookup enum");

void exports_reconciler_api_indexes_index(wit_string_t *name,
                                          exports_reconciler_api_indexes_json_t *primary,
                                          RG_WORLD_LIST_STRING *ret) {
  const char *wanted = rg_strndup((const char *)name->ptr, name->len);
  reconciler_api_types_json_free(name);  // a string like any other
  const rg_json_t *value = take_json(primary, true, "the primary to index");
  rg_manifest_t m = manifest();
  rg_values_t values = {0};
  size_t i = 0;
  while (i < RG_MAX_INDEXES &&
         (m.indexes[i].name == NULL || strcmp(m.indexes[i].name, wanted) != 0))
    i++;
  if (i == RG_MAX_INDEXES || m.indexes[i].index == NULL) {
    rg_warn("index was called for `%s`, which no entry of .indexes declares: no values", wanted);
  } else if (!m.indexes[i].index(value, &values)) {
    rg_fatal(rg_format("index %s of %s: the index function of indexes[%zu] failed", wanted,
                       describe(m.primary, value), i));
  }
  *ret = (RG_WORLD_LIST_STRING){0};
  if (values.len > 0) {
    ret->ptr = calloc(values.len, sizeof *ret->ptr);
    if (ret->ptr == NULL) rg_fatal("out of memory");
  }
  for (size_t v = 0; v < values.len; v++) ret->ptr[ret->len++] = give(values.items[v]);
  rg_arena_free();
}
#endif

// ---------------------------------------------------------------------------------------------
// Imports

void rg_log(rg_level_t level, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  wit_string_t message = borrow(rg_vformat(fmt, args));
  va_end(args);
  reconciler_api_log_log((reconciler_api_log_level_t)level, &message);
}

rg_err_t rg_lister_get(const rg_ref_t *ref, const rg_json_t **object) {
  reconciler_api_types_object_ref_t wit_ref = borrow_ref(ref);
  reconciler_api_lister_option_json_t found;
  reconciler_api_types_error_t err;
  *object = NULL;
  if (!reconciler_api_lister_get(&wit_ref, &found, &err)) return take_error(&err);
  if (found.is_some) *object = take_json(&found.val, true, "a cached object");
  return RG_OK;
}

rg_err_t rg_lister_list(rg_gvk_t kind, const char *namespace, const char *label_selector,
                        const rg_json_t **objects) {
  reconciler_api_types_gvk_t wit_kind = {borrow(kind.group), borrow(kind.version),
                                         borrow(kind.kind)};
  wit_string_t ns = borrow(namespace), selector = borrow(label_selector);
  reconciler_api_lister_list_json_t list;
  reconciler_api_types_error_t err;
  *objects = NULL;
  if (!reconciler_api_lister_list(&wit_kind, namespace != NULL ? &ns : NULL,
                                  label_selector != NULL ? &selector : NULL, &list, &err))
    return take_error(&err);
  const rg_json_t **items = rg_alloc(list.len * sizeof *items);
  for (size_t i = 0; i < list.len; i++) items[i] = take_json(&list.ptr[i], true, "a cached object");
  if (list.len > 0) free(list.ptr);  // the list itself (its texts are the arena's now)
  *objects = rg_json_array_of(items, list.len);
  return RG_OK;
}

rg_err_t rg_cluster_patch_status(const rg_ref_t *ref, const char *patch,
                                 const rg_json_t **returned) {
  reconciler_api_types_object_ref_t wit_ref = borrow_ref(ref);
  wit_string_t wit_patch = borrow(patch), object;
  reconciler_api_types_error_t err;
  if (returned != NULL) *returned = NULL;
  if (!reconciler_api_cluster_patch_status(&wit_ref, &wit_patch, &object, &err))
    return take_error(&err);
  const rg_json_t *value = take_json(&object, returned != NULL, "the object of a status patch");
  if (returned != NULL) *returned = value;
  return RG_OK;
}

rg_err_t rg_cluster_apply(const char *object, const rg_json_t **returned) {
  wit_string_t body = borrow(object), applied;
  reconciler_api_types_error_t err;
  if (returned != NULL) *returned = NULL;
  if (!reconciler_api_cluster_apply(&body, &applied, &err)) return take_error(&err);
  const rg_json_t *value = take_json(&applied, returned != NULL, "the applied object");
  if (returned != NULL) *returned = value;
  return RG_OK;
}

rg_err_t rg_cluster_apply_with(const char *object, rg_apply_options_t options,
                               const rg_json_t **returned) {
  wit_string_t body = borrow(object), applied;
  reconciler_api_cluster_apply_options_t wit_options = {.force = options.force};
  reconciler_api_types_error_t err;
  if (returned != NULL) *returned = NULL;
  if (!reconciler_api_cluster_apply_with(&body, &wit_options, &applied, &err))
    return take_error(&err);
  const rg_json_t *value = take_json(&applied, returned != NULL, "the applied object");
  if (returned != NULL) *returned = value;
  return RG_OK;
}

rg_err_t rg_cluster_delete(const rg_ref_t *ref, bool *existed) {
  reconciler_api_types_object_ref_t wit_ref = borrow_ref(ref);
  bool deleted;
  reconciler_api_types_error_t err;
  if (!reconciler_api_cluster_delete(&wit_ref, &deleted, &err)) return take_error(&err);
  if (existed != NULL) *existed = deleted;
  return RG_OK;
}

rg_err_t rg_event_record(const rg_ref_t *regarding, rg_event_type_t type, const char *reason,
                         const char *message) {
  reconciler_api_cluster_event_t event = {
      .regarding = borrow_ref(regarding),
      .event_type = type == RG_EVENT_WARNING ? RECONCILER_API_CLUSTER_EVENT_TYPE_WARNING
                                             : RECONCILER_API_CLUSTER_EVENT_TYPE_NORMAL,
      .reason = borrow(reason),
      .message = borrow(message),
  };
  reconciler_api_types_error_t err;
  if (!reconciler_api_cluster_record_event(&event, &err)) return take_error(&err);
  return RG_OK;
}

static void best_effort(const rg_ref_t *regarding, rg_event_type_t type, const char *reason,
                        const char *fmt, va_list args) {
  rg_err_t err = rg_event_record(regarding, type, reason, rg_vformat(fmt, args));
  if (err != RG_OK) {
    rg_warn("could not record event %s on %s %s%s%s: %s: %s", reason, regarding->kind.kind,
            regarding->namespace != NULL ? regarding->namespace : "",
            regarding->namespace != NULL ? "/" : "", regarding->name, rg_err_name(err),
            rg_last_error());
  }
}

void rg_event_normal(const rg_ref_t *regarding, const char *reason, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  best_effort(regarding, RG_EVENT_NORMAL, reason, fmt, args);
  va_end(args);
}

void rg_event_warning(const rg_ref_t *regarding, const char *reason, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  best_effort(regarding, RG_EVENT_WARNING, reason, fmt, args);
  va_end(args);
}

static rg_err_t enqueue(rg_key_t key, uint64_t *after_ms) {
  reconciler_api_types_object_key_t wit_key = {.name = borrow(key.name)};
  if (key.namespace != NULL) {
    wit_key.namespace_.is_some = true;
    wit_key.namespace_.val = borrow(key.namespace);
  }
  reconciler_api_types_error_t err;
  if (!reconciler_api_queue_enqueue(&wit_key, after_ms, &err)) return take_error(&err);
  return RG_OK;
}

rg_err_t rg_queue_enqueue(rg_key_t key) { return enqueue(key, NULL); }

rg_err_t rg_queue_enqueue_after_ms(rg_key_t key, uint64_t after_ms) {
  return enqueue(key, &after_ms);
}
