// See reconciler_testing.h. The generated import functions (wit-bindgen's `reconciler_api_*`),
// answered from objects the test loaded, so that the SDK and the guest run natively; and the
// calls of the generated export functions the host would make. The signatures are the generated
// header's (the world's, RG_WORLD_H, as for the SDK), so a change of the contract that the fake
// does not follow fails to compile here. What it returns is malloc'd as the generated code's
// cabi_realloc does, so a leak checker sees whether the SDK frees it.
//
// Native code only, with libc's stdio: a component never holds this file.
#define _POSIX_C_SOURCE 200809L  // strdup, open_memstream, dprintf

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reconciler_testing.h"
#include "rg_fake_selector.h"

#ifndef RG_WORLD_H
#define RG_WORLD_H "controller.h"
#endif
#include RG_WORLD_H

typedef reconciler_api_types_json_t wit_string_t;  // the world's string type

// ---------------------------------------------------------------------------------------------
// Memory and text

static void *must(void *p) {
  if (p == NULL) abort();
  return p;
}

static _Noreturn void broken_test(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void broken_test(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fputs("rg_fake: ", stderr);
  vfprintf(stderr, fmt, args);
  fputc('\n', stderr);
  va_end(args);
  abort();
}

// Text built piece by piece (open_memstream, which writes through the pointers to buf and len:
// a text_t stays where text_open put it), malloc'd when closed.
typedef struct text {
  FILE *f;
  char *buf;
  size_t len;
} text_t;

static void text_open(text_t *t) {
  *t = (text_t){0};
  t->f = must(open_memstream(&t->buf, &t->len));
}

static char *text_close(text_t *t) {
  fclose(t->f);
  return t->buf != NULL ? t->buf : must(strdup(""));
}

static char *print(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *print(const char *fmt, ...) {
  text_t t;
  text_open(&t);
  va_list args;
  va_start(args, fmt);
  vfprintf(t.f, fmt, args);
  va_end(args);
  return text_close(&t);
}

// Strings handed to the test, freed by rg_fake_reset.
static char **handed;
static size_t handed_len;

static const char *hand(char *text) {
  handed = must(realloc(handed, (handed_len + 1) * sizeof *handed));
  handed[handed_len++] = text;
  return text;
}

static const char *or_empty(const char *text) { return text != NULL ? text : ""; }

// As the generated code's: the canonical ABI's allocator, whose zero-size answer is `align`.
void *cabi_realloc(void *ptr, size_t old_size, size_t align, size_t new_size) {
  (void)old_size;
  if (new_size == 0) return (void *)align;
  return must(realloc(ptr, new_size));
}

// What the host passes: a copy through cabi_realloc (so an empty string is not the allocator's).
static wit_string_t given(const char *text) {
  wit_string_t out = {NULL, strlen(text)};
  out.ptr = cabi_realloc(NULL, 0, 1, out.len);
  memcpy(out.ptr, text, out.len);
  return out;
}

// A string the guest passed, as a malloc'd C string.
static char *c_string(const wit_string_t *s) {
  return must(strndup((const char *)s->ptr, s->len));
}

// ---------------------------------------------------------------------------------------------
// The objects

typedef struct object {
  char *group, *version, *kind, *namespace, *name;  // namespace NULL: cluster-scoped
  char **label_keys, **label_values;
  size_t labels;
  bool deleting;
  char *json;
} object_t;

static object_t *objects;
static size_t object_count;

static bool same(const char *a, const char *b) {
  return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

static char *dup_or_null(const char *text) { return text != NULL ? must(strdup(text)) : NULL; }

static void object_free(object_t *o) {
  free(o->group);
  free(o->version);
  free(o->kind);
  free(o->namespace);
  free(o->name);
  for (size_t i = 0; i < o->labels; i++) {
    free(o->label_keys[i]);
    free(o->label_values[i]);
  }
  free(o->label_keys);
  free(o->label_values);
  free(o->json);
}

static object_t *find(const char *group, const char *version, const char *kind,
                      const char *namespace, const char *name) {
  for (size_t i = 0; i < object_count; i++) {
    object_t *o = &objects[i];
    if (strcmp(o->group, or_empty(group)) == 0 && strcmp(o->version, or_empty(version)) == 0 &&
        strcmp(o->kind, kind) == 0 && same(o->namespace, namespace) && strcmp(o->name, name) == 0)
      return o;
  }
  return NULL;
}

// Stores `value` (parsed, in the SDK's arena), replacing the object of the same name; false when
// it lacks apiVersion, kind or metadata.name.
static bool store(const rg_json_t *value) {
  rg_ref_t ref;
  if (rg_json_type(value) != RG_JSON_OBJECT || !rg_ref_from_json(value, &ref)) return false;
  object_t o = {
      .group = must(strdup(ref.kind.group)),
      .version = must(strdup(ref.kind.version)),
      .kind = must(strdup(ref.kind.kind)),
      .namespace = dup_or_null(ref.namespace),
      .name = must(strdup(ref.name)),
      .json = must(strdup(rg_json_serialize(value))),
  };
  const rg_json_t *deletion = rg_json_path(value, "metadata", "deletionTimestamp");
  o.deleting = rg_json_type(deletion) != RG_JSON_ABSENT && rg_json_type(deletion) != RG_JSON_NULL;
  const rg_json_t *labels = rg_json_path(value, "metadata", "labels");
  size_t count = rg_json_len(labels);
  o.label_keys = must(calloc(count + 1, sizeof *o.label_keys));
  o.label_values = must(calloc(count + 1, sizeof *o.label_values));
  for (const rg_json_t *l = rg_json_first(labels); l != NULL; l = rg_json_next(l)) {
    if (rg_json_string(l) == NULL) continue;
    o.label_keys[o.labels] = must(strdup(rg_json_key(l)));
    o.label_values[o.labels++] = must(strdup(rg_json_string(l)));
  }
  object_t *old = find(o.group, o.version, o.kind, o.namespace, o.name);
  if (old != NULL) {
    object_free(old);
    *old = o;
    return true;
  }
  objects = must(realloc(objects, (object_count + 1) * sizeof *objects));
  objects[object_count++] = o;
  return true;
}

static void forget(object_t *o) {
  object_free(o);
  size_t i = (size_t)(o - objects);
  memmove(&objects[i], &objects[i + 1], (object_count - i - 1) * sizeof *objects);
  object_count--;
}

void rg_fake_load(const char *json) {
  const rg_json_t *value = rg_json_parse(json, strlen(json));
  if (value == NULL) broken_test("rg_fake_load: %s: %.200s", rg_last_error(), json);
  bool list = rg_json_type(value) == RG_JSON_ARRAY;
  const rg_json_t *item = list ? rg_json_first(value) : value;
  for (size_t i = 0; item != NULL; item = list ? rg_json_next(item) : NULL, i++) {
    if (!store(item)) {
      broken_test("rg_fake_load: object %zu has no apiVersion, kind or metadata.name: %.200s", i,
                  rg_json_serialize(item));
    }
  }
}

const char *rg_fake_get(const rg_ref_t *ref) {
  object_t *o = find(ref->kind.group, ref->kind.version, ref->kind.kind, ref->namespace, ref->name);
  return o != NULL ? hand(must(strdup(o->json))) : NULL;
}

// ---------------------------------------------------------------------------------------------
// JSON merge patch (RFC 7386), for the writes

static void merge(FILE *out, const rg_json_t *target, const rg_json_t *patch);

static void member(FILE *out, bool *first, const char *key) {
  fputs(*first ? "" : ",", out);
  fputs(rg_json_quote(key), out);
  fputc(':', out);
  *first = false;
}

static void merge(FILE *out, const rg_json_t *target, const rg_json_t *patch) {
  if (rg_json_type(patch) != RG_JSON_OBJECT) {
    fputs(rg_json_serialize(patch), out);
    return;
  }
  bool first = true, object = rg_json_type(target) == RG_JSON_OBJECT;
  fputc('{', out);
  for (const rg_json_t *m = object ? rg_json_first(target) : NULL; m != NULL; m = rg_json_next(m)) {
    const rg_json_t *p = rg_json_get(patch, rg_json_key(m));
    if (rg_json_type(p) == RG_JSON_NULL) continue;  // removed
    member(out, &first, rg_json_key(m));
    if (p == NULL) fputs(rg_json_serialize(m), out);
    else merge(out, m, p);
  }
  for (const rg_json_t *p = rg_json_first(patch); p != NULL; p = rg_json_next(p)) {
    if (rg_json_type(p) == RG_JSON_NULL || (object && rg_json_get(target, rg_json_key(p)) != NULL))
      continue;
    member(out, &first, rg_json_key(p));
    merge(out, NULL, p);  // an added object loses its nulls too
  }
  fputc('}', out);
}

// `patch` merged into the object `o` (NULL: none yet), stored; the stored object.
static object_t *merge_into(object_t *o, const rg_json_t *patch) {
  text_t t;
  text_open(&t);
  merge(t.f, o != NULL ? rg_json_parse(o->json, strlen(o->json)) : NULL, patch);
  char *merged = text_close(&t);
  rg_ref_t ref;
  const rg_json_t *value = rg_json_parse(merged, strlen(merged));
  bool named = rg_ref_from_json(value, &ref);
  free(merged);
  if (!named || !store(value)) return NULL;
  return find(ref.kind.group, ref.kind.version, ref.kind.kind, ref.namespace, ref.name);
}

// ---------------------------------------------------------------------------------------------
// Calls, and what the test scripted

static char **calls;
static size_t call_count;
static int log_fd = -1;

static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void record(const char *fmt, ...) {
  text_t t;
  text_open(&t);
  va_list args;
  va_start(args, fmt);
  vfprintf(t.f, fmt, args);
  va_end(args);
  calls = must(realloc(calls, (call_count + 1) * sizeof *calls));
  calls[call_count++] = text_close(&t);
}

typedef struct script {
  char *call;  // NULL: any but log
  bool fails;
  rg_err_t kind;
  char *text;  // NULL: lister.get's none
  struct script *next;
} script_t;

static script_t *scripts;  // in the order given

static void script(const char *call, bool fails, rg_err_t kind, const char *text) {
  script_t **end = &scripts;
  while (*end != NULL) end = &(*end)->next;
  *end = must(calloc(1, sizeof **end));
  **end = (script_t){dup_or_null(call), fails, kind, dup_or_null(text), NULL};
}

// The calls a script may name.
static bool is_call(const char *call) {
  static const char *const names[] = {
      "lister.get",         "lister.list",    "cluster.patch-status", "cluster.apply",
      "cluster.apply-with", "cluster.delete", "cluster.record-event", "queue.enqueue",
  };
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    if (strcmp(call, names[i]) == 0) return true;
  }
  return false;
}

void rg_fake_fail_next(const char *call, rg_err_t kind, const char *text) {
  if (call != NULL && !is_call(call)) {
    broken_test("rg_fake_fail_next(%s): no such call (lister.get, lister.list, "
                "cluster.patch-status, cluster.apply, cluster.apply-with, cluster.delete, "
                "cluster.record-event, queue.enqueue; NULL: the next one)",
                call);
  }
  if (kind < RG_DENIED || kind > RG_OTHER) {
    broken_test("rg_fake_fail_next(%s, %d): name an error, RG_DENIED to RG_OTHER", or_empty(call),
                (int)kind);
  }
  script(call, true, kind, text != NULL ? text : "");
}

void rg_fake_answer_next(const char *call, const char *text) {
  static const char *const answered[] = {"lister.get", "cluster.patch-status", "cluster.apply",
                                         "cluster.apply-with"};
  bool known = false;
  for (size_t i = 0; call != NULL && i < sizeof answered / sizeof *answered; i++)
    known |= strcmp(call, answered[i]) == 0;
  if (!known) {
    broken_test("rg_fake_answer_next(%s): only lister.get, cluster.patch-status, cluster.apply "
                "and cluster.apply-with answer with text",
                or_empty(call));
  }
  if (text == NULL && strcmp(call, "lister.get") != 0)
    broken_test("rg_fake_answer_next(%s, NULL): only lister.get answers none", call);
  script(call, false, RG_OK, text);
}

// The first script for `call`, taken off the list (the caller frees it), or NULL.
static script_t *scripted(const char *call) {
  for (script_t **s = &scripts; *s != NULL; s = &(*s)->next) {
    if ((*s)->call == NULL ? (*s)->fails : strcmp((*s)->call, call) == 0) {
      script_t *found = *s;
      *s = found->next;
      return found;
    }
  }
  return NULL;
}

static void script_free(script_t *s) {
  if (s == NULL) return;
  free(s->call);
  free(s->text);
  free(s);
}

// The error a call answers: *err filled in, false returned, as the generated code does.
static bool error(reconciler_api_types_error_t *err, rg_err_t kind, const char *text) {
  err->tag = (uint8_t)(kind - 1);  // rg_err_t follows the WIT's cases from RG_DENIED on
  err->val.other = given(text);
  return false;
}

// Whether a script fails `call` (*err then holds the error); an answer scripted for it is left in
// *answer (the caller frees it), else NULL.
static bool failed(const char *call, reconciler_api_types_error_t *err, script_t **answer) {
  script_t *s = scripted(call);
  *answer = NULL;
  if (s == NULL) return false;
  if (!s->fails) {
    *answer = s;
    return false;
  }
  error(err, s->kind, s->text);
  script_free(s);
  return true;
}

static const char *join(const char *prefix, const char *other) {
  text_t t;
  text_open(&t);
  for (size_t i = 0; i < call_count; i++) {
    if (prefix == NULL || strncmp(calls[i], prefix, strlen(prefix)) == 0 ||
        (other != NULL && strncmp(calls[i], other, strlen(other)) == 0))
      fprintf(t.f, "%s\n", calls[i]);
  }
  return hand(text_close(&t));
}

const char *rg_fake_calls(void) { return join(NULL, NULL); }
const char *rg_fake_writes(void) { return join("cluster.", "queue."); }
const char *rg_fake_logs(void) { return join("log ", NULL); }
void rg_fake_log_fd(int fd) { log_fd = fd; }

void rg_fake_reset(void) {
  for (size_t i = 0; i < object_count; i++) object_free(&objects[i]);
  free(objects);
  objects = NULL;
  object_count = 0;
  for (size_t i = 0; i < call_count; i++) free(calls[i]);
  free(calls);
  calls = NULL;
  call_count = 0;
  while (scripts != NULL) {
    script_t *next = scripts->next;
    script_free(scripts);
    scripts = next;
  }
  for (size_t i = 0; i < handed_len; i++) free(handed[i]);
  free(handed);
  handed = NULL;
  handed_len = 0;
}

// ---------------------------------------------------------------------------------------------
// The imports

static char *kind_text(const reconciler_api_types_gvk_t *kind) {
  return print("%.*s%s%.*s/%.*s", (int)kind->group.len, (const char *)kind->group.ptr,
               kind->group.len > 0 ? "/" : "", (int)kind->version.len,
               (const char *)kind->version.ptr, (int)kind->kind.len, (const char *)kind->kind.ptr);
}

static char *ref_text(const reconciler_api_types_object_ref_t *ref) {
  char *kind = kind_text(&ref->kind);
  const wit_string_t *ns = &ref->namespace_.val;
  char *out = print("%s %.*s%s%.*s", kind, ref->namespace_.is_some ? (int)ns->len : 0,
                    (const char *)ns->ptr, ref->namespace_.is_some ? "/" : "",
                    (int)ref->name.len, (const char *)ref->name.ptr);
  free(kind);
  return out;
}

// The loaded object a reference names, or NULL.
static object_t *find_ref(const reconciler_api_types_object_ref_t *ref) {
  char *group = c_string(&ref->kind.group), *version = c_string(&ref->kind.version);
  char *kind = c_string(&ref->kind.kind), *name = c_string(&ref->name);
  char *namespace = ref->namespace_.is_some ? c_string(&ref->namespace_.val) : NULL;
  object_t *o = find(group, version, kind, namespace, name);
  free(group);
  free(version);
  free(kind);
  free(name);
  free(namespace);
  return o;
}

void reconciler_api_log_log(reconciler_api_log_level_t level, wit_string_t *message) {
  static const char *const levels[] = {"trace", "debug", "info", "warn", "error"};
  record("log %s %.*s", level < 5 ? levels[level] : "?", (int)message->len,
         (const char *)message->ptr);
  if (log_fd >= 0) dprintf(log_fd, "%s\n", calls[call_count - 1]);
}

bool reconciler_api_lister_get(reconciler_api_lister_object_ref_t *ref,
                               reconciler_api_lister_option_json_t *ret,
                               reconciler_api_lister_error_t *err) {
  char *what = ref_text(ref);
  record("lister.get %s", what);
  free(what);
  script_t *answer;
  if (failed("lister.get", err, &answer)) return false;
  object_t *o = answer != NULL ? NULL : find_ref(ref);
  const char *text = answer != NULL ? answer->text : o != NULL ? o->json : NULL;
  ret->is_some = text != NULL;
  if (text != NULL) ret->val = given(text);
  script_free(answer);
  return true;
}

static int by_namespace_then_name(const void *a, const void *b) {
  const object_t *x = *(object_t *const *)a, *y = *(object_t *const *)b;
  int order = strcmp(or_empty(x->namespace), or_empty(y->namespace));
  return order != 0 ? order : strcmp(x->name, y->name);
}

bool reconciler_api_lister_list(reconciler_api_lister_gvk_t *kind, wit_string_t *maybe_namespace_,
                                wit_string_t *maybe_label_selector,
                                reconciler_api_lister_list_json_t *ret,
                                reconciler_api_lister_error_t *err) {
  char *what = kind_text(kind);
  char *namespace = maybe_namespace_ != NULL ? c_string(maybe_namespace_) : NULL;
  char *selector_text = maybe_label_selector != NULL ? c_string(maybe_label_selector) : NULL;
  record("lister.list %s namespace=%s selector=%s", what, namespace ? namespace : "(all)",
         selector_text ? selector_text : "(all)");
  free(what);
  script_t *answer;
  bool ok = !failed("lister.list", err, &answer);
  char *invalid = NULL;
  rg_fake_selector_t *selector = NULL;
  if (ok && selector_text != NULL) {
    selector = rg_fake_selector_parse(selector_text, &invalid);
    if (selector == NULL) ok = error(err, RG_INVALID, invalid);
  }
  if (ok) {
    char *group = c_string(&kind->group), *version = c_string(&kind->version);
    char *name = c_string(&kind->kind);
    object_t **found = must(calloc(object_count + 1, sizeof *found));
    size_t len = 0;
    for (size_t i = 0; i < object_count; i++) {
      object_t *o = &objects[i];
      if (strcmp(o->group, group) == 0 && strcmp(o->version, version) == 0 &&
          strcmp(o->kind, name) == 0 && (namespace == NULL || same(o->namespace, namespace)) &&
          rg_fake_selector_matches(selector, o->label_keys, o->label_values, o->labels))
        found[len++] = o;
    }
    qsort(found, len, sizeof *found, by_namespace_then_name);
    // An empty list's pointer is cabi_realloc's answer to size 0, not one to free.
    *ret = (reconciler_api_lister_list_json_t){cabi_realloc(NULL, 0, 4, len * sizeof *ret->ptr),
                                               len};
    for (size_t i = 0; i < len; i++) ret->ptr[i] = given(found[i]->json);
    free(found);
    free(group);
    free(version);
    free(name);
  }
  rg_fake_selector_free(selector);
  free(invalid);
  free(namespace);
  free(selector_text);
  script_free(answer);
  return ok;
}

// The answer of a write: the object as it now is (or as scripted), into *ret. NULL for both: a
// merge that left the object without its name.
static bool written(object_t *o, script_t *answer, wit_string_t *ret,
                    reconciler_api_types_error_t *err) {
  if (o == NULL && answer == NULL) {
    return error(err, RG_INVALID, "the merged object has no apiVersion, kind or metadata.name");
  }
  *ret = given(answer != NULL ? answer->text : o->json);
  script_free(answer);
  return true;
}

bool reconciler_api_cluster_patch_status(reconciler_api_cluster_object_ref_t *ref,
                                         reconciler_api_cluster_json_t *patch,
                                         reconciler_api_cluster_json_t *ret,
                                         reconciler_api_cluster_error_t *err) {
  char *what = ref_text(ref);
  record("cluster.patch-status %s %.*s", what, (int)patch->len, (const char *)patch->ptr);
  script_t *answer;
  bool ok = !failed("cluster.patch-status", err, &answer);
  if (ok && answer != NULL) {
    free(what);
    return written(NULL, answer, ret, err);
  }
  object_t *o = ok ? find_ref(ref) : NULL;
  const rg_json_t *value = ok ? rg_json_parse((const char *)patch->ptr, patch->len) : NULL;
  if (ok && o == NULL) {
    char *text = print("patch-status of %s: not found (the fake host has no such object; load "
                       "it with rg_fake_load)",
                       what);
    ok = error(err, RG_NOT_FOUND, text);
    free(text);
  } else if (ok && value == NULL) {
    char *text = print("patch: %s", rg_last_error());
    ok = error(err, RG_INVALID, text);
    free(text);
  }
  free(what);
  if (!ok) return false;
  // Only the status: {"status": <the patch's>}.
  const rg_json_t *status = rg_json_get(value, "status");
  if (status != NULL) {
    const char *only = rg_format("{\"status\":%s}", rg_json_serialize(status));
    o = merge_into(o, rg_json_parse(only, strlen(only)));
  }
  return written(o, NULL, ret, err);
}

// apply and apply-with: the object merged into the loaded one, or added.
static bool apply(const char *call, const wit_string_t *body, wit_string_t *ret,
                  reconciler_api_types_error_t *err) {
  script_t *answer;
  if (failed(call, err, &answer)) return false;
  if (answer != NULL) return written(NULL, answer, ret, err);
  const rg_json_t *value = rg_json_parse((const char *)body->ptr, body->len);
  rg_ref_t ref;
  if (value == NULL) {
    char *text = print("object: %s", rg_last_error());
    error(err, RG_INVALID, text);
    free(text);
    return false;
  }
  if (rg_json_type(value) != RG_JSON_OBJECT || !rg_ref_from_json(value, &ref)) {
    return error(err, RG_INVALID, "object: an apply needs apiVersion, kind and metadata.name");
  }
  object_t *o = find(ref.kind.group, ref.kind.version, ref.kind.kind, ref.namespace, ref.name);
  return written(merge_into(o, value), NULL, ret, err);
}

bool reconciler_api_cluster_apply(reconciler_api_cluster_json_t *object,
                                  reconciler_api_cluster_json_t *ret,
                                  reconciler_api_cluster_error_t *err) {
  record("cluster.apply %.*s", (int)object->len, (const char *)object->ptr);
  return apply("cluster.apply", object, ret, err);
}

bool reconciler_api_cluster_apply_with(reconciler_api_cluster_json_t *object,
                                       reconciler_api_cluster_apply_options_t *options,
                                       reconciler_api_cluster_json_t *ret,
                                       reconciler_api_cluster_error_t *err) {
  record("cluster.apply-with force=%s %.*s", options->force ? "true" : "false", (int)object->len,
         (const char *)object->ptr);
  return apply("cluster.apply-with", object, ret, err);
}

bool reconciler_api_cluster_delete(reconciler_api_cluster_object_ref_t *ref, bool *ret,
                                   reconciler_api_cluster_error_t *err) {
  char *what = ref_text(ref);
  record("cluster.delete %s", what);
  free(what);
  script_t *answer;
  if (failed("cluster.delete", err, &answer)) return false;
  script_free(answer);  // none: delete takes no text
  object_t *o = find_ref(ref);
  *ret = o != NULL;
  if (o != NULL) forget(o);
  return true;
}

bool reconciler_api_cluster_record_event(reconciler_api_cluster_event_t *event,
                                         reconciler_api_cluster_error_t *err) {
  char *what = ref_text(&event->regarding);
  record("cluster.record-event %s %.*s %s: %.*s",
         event->event_type == RECONCILER_API_CLUSTER_EVENT_TYPE_WARNING ? "Warning" : "Normal",
         (int)event->reason.len, (const char *)event->reason.ptr, what, (int)event->message.len,
         (const char *)event->message.ptr);
  free(what);
  script_t *answer;
  bool ok = !failed("cluster.record-event", err, &answer);
  script_free(answer);  // none: an event takes no text
  return ok;
}

bool reconciler_api_queue_enqueue(reconciler_api_queue_object_key_t *key, uint64_t *maybe_after_ms,
                                  reconciler_api_queue_error_t *err) {
  char after[24] = "none";
  if (maybe_after_ms != NULL) {
    snprintf(after, sizeof after, "%llu", (unsigned long long)*maybe_after_ms);
  }
  const wit_string_t *ns = &key->namespace_.val;
  record("queue.enqueue %.*s%s%.*s after=%s", key->namespace_.is_some ? (int)ns->len : 0,
         (const char *)ns->ptr, key->namespace_.is_some ? "/" : "", (int)key->name.len,
         (const char *)key->name.ptr, after);
  script_t *answer;
  bool ok = !failed("queue.enqueue", err, &answer);
  script_free(answer);  // none: an enqueue takes no text
  return ok;
}

// ---------------------------------------------------------------------------------------------
// The exports, called as the host calls them

const char *rg_fake_reconcile(rg_key_t key) {
  rg_manifest_t m = manifest();
  object_t *o = find(m.primary.group, m.primary.version, m.primary.kind, key.namespace, key.name);
  exports_reconciler_api_reconciler_request_t request = {
      .ref = {.kind = {given(or_empty(m.primary.group)), given(or_empty(m.primary.version)),
                       given(m.primary.kind)},
              .name = given(key.name)},
      .deleting = o != NULL && o->deleting,
  };
  if (key.namespace != NULL) {
    request.ref.namespace_.is_some = true;
    request.ref.namespace_.val = given(key.namespace);
  }
  if (o != NULL) {
    request.object.is_some = true;
    request.object.val = given(o->json);
  }
  exports_reconciler_api_reconciler_action_t action;
  exports_reconciler_api_reconciler_reconcile_error_t failure;
  if (exports_reconciler_api_reconciler_reconcile(&request, &action, &failure)) {  // frees request
    if (!action.requeue_after_ms.is_some) return hand(print("ok"));
    return hand(print("requeue after %llu ms", (unsigned long long)action.requeue_after_ms.val));
  }
  const wit_string_t *message = &failure.val.transient;  // both cases hold a string
  char *out = print("%s: %.*s",
                    failure.tag == RECONCILER_API_TYPES_RECONCILE_ERROR_PERMANENT ? "permanent"
                                                                                   : "transient",
                    (int)message->len, (const char *)message->ptr);
  exports_reconciler_api_reconciler_reconcile_error_free(&failure);  // as the post-return does
  return hand(out);
}

#ifdef EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_OWNER
const char *rg_fake_map(rg_gvk_t kind, const char *object_json) {
  exports_reconciler_api_watches_gvk_t wit_kind = {given(or_empty(kind.group)),
                                                   given(or_empty(kind.version)), given(kind.kind)};
  exports_reconciler_api_watches_json_t object = given(object_json);
  exports_reconciler_api_watches_list_object_key_t keys;
  exports_reconciler_api_watches_map(&wit_kind, &object, &keys);  // frees both
  text_t t;
  text_open(&t);
  for (size_t i = 0; i < keys.len; i++) {
    const reconciler_api_types_object_key_t *k = &keys.ptr[i];
    const wit_string_t *ns = &k->namespace_.val;
    fprintf(t.f, "%.*s%s%.*s\n", k->namespace_.is_some ? (int)ns->len : 0, (const char *)ns->ptr,
            k->namespace_.is_some ? "/" : "", (int)k->name.len, (const char *)k->name.ptr);
  }
  exports_reconciler_api_watches_list_object_key_free(&keys);
  return hand(text_close(&t));
}
#else
const char *rg_fake_map(rg_gvk_t kind, const char *object_json) {
  (void)object_json;
  broken_test("rg_fake_map(%s): this test is built for a world without the `watches` export; "
              "build it for the guest's world (its wit-world file)",
              kind.kind);
}
#endif

#ifdef EXPORTS_RECONCILER_API_INDEXES_LOOKUP_NAME
// As bindings.c: the world's name for list<string>.
#ifndef RG_WORLD_LIST_STRING
#define RG_WORLD_LIST_STRING indexing_controller_list_string_t
#endif

const char *rg_fake_index(const char *name, const char *primary_json) {
  wit_string_t wit_name = given(name), primary = given(primary_json);
  RG_WORLD_LIST_STRING values;
  exports_reconciler_api_indexes_index(&wit_name, &primary, &values);  // frees both
  text_t t;
  text_open(&t);
  for (size_t i = 0; i < values.len; i++) {
    fprintf(t.f, "%.*s\n", (int)values.ptr[i].len, (const char *)values.ptr[i].ptr);
    if (values.ptr[i].len > 0) free(values.ptr[i].ptr);  // as the post-return frees the list
  }
  if (values.len > 0) free(values.ptr);
  return hand(text_close(&t));
}
#else
const char *rg_fake_index(const char *name, const char *primary_json) {
  (void)primary_json;
  broken_test("rg_fake_index(%s): this test is built for a world without the `indexes` export; "
              "build it for the guest's world (its wit-world file)",
              name);
}
#endif
