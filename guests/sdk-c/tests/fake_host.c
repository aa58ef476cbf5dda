// See fake_host.h. The signatures are the generated header's (the world's, RG_WORLD_H: generated
// from wit/ by test.sh), so a change of the contract that the binding layer does not follow fails
// here.
#define _POSIX_C_SOURCE 200809L  // strdup

#include "fake_host.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef RG_WORLD_H
#define RG_WORLD_H "controller.h"
#endif
#include RG_WORLD_H

typedef reconciler_api_types_json_t wit_string_t;  // the world's string type

const char *fake_calls[64];
size_t fake_call_count;
int fake_log_fd = -1;

static struct {
  enum { NONE, ERROR, TEXT, LIST, BOOL } kind;
  uint8_t tag;
  const char *text;
  const char *const *items;
  size_t len;
  bool flag;
} next;

void fake_reset(void) {
  for (size_t i = 0; i < fake_call_count; i++) free((void *)fake_calls[i]);
  fake_call_count = 0;
  next.kind = NONE;
}

void fake_next_error(uint8_t tag, const char *text) {
  next.kind = ERROR;
  next.tag = tag;
  next.text = text;
}

void fake_next_text(const char *text) {
  next.kind = TEXT;
  next.text = text;
}

void fake_next_list(const char *const *items, size_t len) {
  next.kind = LIST;
  next.items = items;
  next.len = len;
}

void fake_next_bool(bool existed) {
  next.kind = BOOL;
  next.flag = existed;
}

// As the generated code's: the canonical ABI's allocator, whose zero-size answer is `align`.
void *cabi_realloc(void *ptr, size_t old_size, size_t align, size_t new_size) {
  (void)old_size;
  if (new_size == 0) return (void *)align;
  void *out = realloc(ptr, new_size);
  if (out == NULL) abort();
  return out;
}

// As the generated `<world>_string_dup`: through cabi_realloc, so that an empty string is not the
// allocator's.
static wit_string_t given(const char *text) {
  wit_string_t out = {NULL, strlen(text)};
  out.ptr = cabi_realloc(NULL, 0, 1, out.len);
  memcpy(out.ptr, text, out.len);
  return out;
}

static const char *str(const wit_string_t *s) {
  static char buf[16][256];  // several in one line
  static int turn;
  char *out = buf[turn++ % 16];
  snprintf(out, sizeof buf[0], "%.*s", (int)s->len, (const char *)s->ptr);
  return out;
}

static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void record(const char *fmt, ...) {
  char line[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  if (fake_call_count < sizeof fake_calls / sizeof *fake_calls) {
    fake_calls[fake_call_count++] = strdup(line);
  }
}

static const char *ref_text(const reconciler_api_types_object_ref_t *ref) {
  static char out[512];
  char kind[256];
  snprintf(kind, sizeof kind, "%s%s%s/%s", str(&ref->kind.group), ref->kind.group.len ? "/" : "",
           str(&ref->kind.version), str(&ref->kind.kind));
  snprintf(out, sizeof out, "%s %s%s%s", kind,
           ref->namespace_.is_some ? str(&ref->namespace_.val) : "",
           ref->namespace_.is_some ? "/" : "", str(&ref->name));
  return out;
}

// Fills *err and says so when the test scripted an error.
static bool failed(reconciler_api_types_error_t *err) {
  if (next.kind != ERROR) return false;
  next.kind = NONE;
  err->tag = next.tag;
  err->val.other = given(next.text);
  return true;
}

static const char *take_text(const char *otherwise) {
  const char *text = next.kind == TEXT ? next.text : otherwise;
  if (next.kind == TEXT) next.kind = NONE;
  return text;
}

void reconciler_api_log_log(reconciler_api_log_level_t level, wit_string_t *message) {
  static const char *levels[] = {"trace", "debug", "info", "warn", "error"};
  record("log %s %s", level < 5 ? levels[level] : "?", str(message));
  if (fake_log_fd >= 0) dprintf(fake_log_fd, "log %s %s\n", level < 5 ? levels[level] : "?", str(message));
}

bool reconciler_api_lister_get(reconciler_api_lister_object_ref_t *ref,
                               reconciler_api_lister_option_json_t *ret,
                               reconciler_api_lister_error_t *err) {
  record("lister.get %s", ref_text(ref));
  if (failed(err)) return false;
  const char *text = take_text(NULL);
  ret->is_some = text != NULL;
  if (text != NULL) ret->val = given(text);
  return true;
}

bool reconciler_api_lister_list(reconciler_api_lister_gvk_t *kind,
                                wit_string_t *maybe_namespace_,
                                wit_string_t *maybe_label_selector,
                                reconciler_api_lister_list_json_t *ret,
                                reconciler_api_lister_error_t *err) {
  record("lister.list %s %s namespace=%s selector=%s", str(&kind->version), str(&kind->kind),
         maybe_namespace_ != NULL ? str(maybe_namespace_) : "(all)",
         maybe_label_selector != NULL ? str(maybe_label_selector) : "(all)");
  if (failed(err)) return false;
  size_t len = next.kind == LIST ? next.len : 0;
  // An empty list's pointer is cabi_realloc's answer to size 0, not one to free.
  *ret = (reconciler_api_lister_list_json_t){cabi_realloc(NULL, 0, 4, len * sizeof *ret->ptr), len};
  for (size_t i = 0; i < len; i++) ret->ptr[i] = given(next.items[i]);
  if (next.kind == LIST) next.kind = NONE;
  return true;
}

bool reconciler_api_cluster_patch_status(reconciler_api_cluster_object_ref_t *ref,
                                         reconciler_api_cluster_json_t *patch,
                                         reconciler_api_cluster_json_t *ret,
                                         reconciler_api_cluster_error_t *err) {
  record("cluster.patch-status %s %s", ref_text(ref), str(patch));
  if (failed(err)) return false;
  *ret = given(take_text("{}"));
  return true;
}

bool reconciler_api_cluster_apply(reconciler_api_cluster_json_t *object,
                                  reconciler_api_cluster_json_t *ret,
                                  reconciler_api_cluster_error_t *err) {
  record("cluster.apply %s", str(object));
  if (failed(err)) return false;
  *ret = given(take_text("{}"));
  return true;
}

bool reconciler_api_cluster_apply_with(reconciler_api_cluster_json_t *object,
                                       reconciler_api_cluster_apply_options_t *options,
                                       reconciler_api_cluster_json_t *ret,
                                       reconciler_api_cluster_error_t *err) {
  record("cluster.apply-with force=%s %s", options->force ? "true" : "false", str(object));
  if (failed(err)) return false;
  *ret = given(take_text("{}"));
  return true;
}

bool reconciler_api_cluster_delete(reconciler_api_cluster_object_ref_t *ref, bool *ret,
                                   reconciler_api_cluster_error_t *err) {
  record("cluster.delete %s", ref_text(ref));
  if (failed(err)) return false;
  *ret = next.kind == BOOL ? next.flag : true;
  if (next.kind == BOOL) next.kind = NONE;
  return true;
}

bool reconciler_api_cluster_record_event(reconciler_api_cluster_event_t *event,
                                         reconciler_api_cluster_error_t *err) {
  record("cluster.record-event %s %s %s: %s",
         event->event_type == RECONCILER_API_CLUSTER_EVENT_TYPE_WARNING ? "Warning" : "Normal",
         str(&event->reason), ref_text(&event->regarding), str(&event->message));
  return !failed(err);
}

bool reconciler_api_queue_enqueue(reconciler_api_queue_object_key_t *key, uint64_t *maybe_after_ms,
                                  reconciler_api_queue_error_t *err) {
  char after[24] = "none";
  if (maybe_after_ms != NULL) snprintf(after, sizeof after, "%llu", (unsigned long long)*maybe_after_ms);
  record("queue.enqueue %s%s%s after=%s", key->namespace_.is_some ? str(&key->namespace_.val) : "",
         key->namespace_.is_some ? "/" : "", str(&key->name), after);
  return !failed(err);
}
