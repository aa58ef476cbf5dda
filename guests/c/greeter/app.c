// A reconciler written in C: the greeter (the same behaviour as guests/python/greeter/app.py,
// pinned by the same fixtures host/tests/fixtures/greeter-*). Bindings come from wit/ (generated
// into the build directory by guests/c/build.sh); clang builds a wasm32-wasi reactor module and
// reconciler-componentize makes it a component.
//
// Manifest name `greeter`, primary `test.reconciler.dev/v1 Widget`, reconciled only when its
// generation changes. Each reconcile writes `status.observedGeneration` and `status.greeting`
// ("hello, <spec.message or name>") and records a Normal `Greeted` event. A Widget whose
// `spec.message` is not a string is a permanent error; a failed status write is transient.
//
// Ownership, as the generated code expects: everything returned to the host (the manifest's
// strings, an error's message) is malloc'd, because the generated post-return functions free
// it; the request is ours to free; strings the host returns from an import are ours to free.
#include <stdlib.h>
#include <string.h>

#include "controller.h"
#include "json.h"

static controller_string_t own(const char *s) {
  controller_string_t out;
  controller_string_dup(&out, s);
  return out;
}

void exports_reconciler_api_reconciler_manifest(
    exports_reconciler_api_reconciler_controller_manifest_t *ret) {
  memset(ret, 0, sizeof *ret);
  ret->name = own("greeter");
  ret->primary.group = own("test.reconciler.dev");
  ret->primary.version = own("v1");
  ret->primary.kind = own("Widget");
  ret->generation_changed_only = true;
}

// A growing byte buffer for the messages and the patch (no stdio: the component then needs no
// WASI at all).
typedef struct {
  char *ptr;
  size_t len, cap;
} buf_t;

static void put(buf_t *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    b->cap = (b->len + n + 1) * 2;
    b->ptr = realloc(b->ptr, b->cap);
    if (b->ptr == NULL) abort();
  }
  memcpy(b->ptr + b->len, s, n);
  b->len += n;
  b->ptr[b->len] = '\0';
}

static void puts_(buf_t *b, const char *s) { put(b, s, strlen(s)); }

static const char *ERROR_TAGS[] = {"denied", "not-found", "conflict", "invalid", "unavailable", "other"};

static bool fail(exports_reconciler_api_reconciler_reconcile_error_t *err, uint8_t tag,
                 buf_t *message) {
  err->tag = tag;
  // The buffer is malloc'd and NUL-terminated: the host takes it, the post-return frees it.
  err->val.transient.ptr = (uint8_t *)message->ptr;
  err->val.transient.len = message->len;
  return false;
}

static void log_line(reconciler_api_log_level_t level, const char *text) {
  controller_string_t message;
  controller_string_set(&message, text);
  reconciler_api_log_log(level, &message);
}

bool exports_reconciler_api_reconciler_reconcile(
    exports_reconciler_api_reconciler_request_t *request,
    exports_reconciler_api_reconciler_action_t *ret,
    exports_reconciler_api_reconciler_reconcile_error_t *err) {
  ret->requeue_after_ms.is_some = false;
  if (!request->object.is_some) {
    log_line(RECONCILER_API_LOG_LEVEL_INFO, "gone");
    exports_reconciler_api_reconciler_request_free(request);
    return true;
  }
  const char *text = (const char *)request->object.val.ptr;
  const char *end = text + request->object.val.len;
  const char *metadata = json_member(text, end, "metadata");
  const char *spec = json_member(text, end, "spec");
  const char *message = json_member(spec, end, "message");
  if (message == NULL) message = json_member(metadata, end, "name");
  buf_t out = {0};
  if (message != NULL && json_type_name(message, end)[0] != 's') {
    puts_(&out, "spec.message must be a string, not ");
    puts_(&out, json_type_name(message, end));
    exports_reconciler_api_reconciler_request_free(request);
    return fail(err, RECONCILER_API_TYPES_RECONCILE_ERROR_PERMANENT, &out);
  }
  size_t greeting_len = 0;
  char *decoded = message != NULL ? json_string(message, end, &greeting_len) : calloc(1, 1);
  if (decoded == NULL) abort();
  buf_t greeting = {0};
  puts_(&greeting, "hello, ");
  put(&greeting, decoded, greeting_len);
  free(decoded);

  // The patch quotes spec.message as the object spelt it (already valid JSON) and the
  // generation as its number token.
  const char *generation = json_member(metadata, end, "generation");
  const char *generation_end = generation != NULL ? json_skip(generation, end) : NULL;
  buf_t patch = {0};
  puts_(&patch, "{\"status\":{\"observedGeneration\":");
  if (generation_end != NULL) put(&patch, generation, (size_t)(generation_end - generation));
  else puts_(&patch, "0");
  puts_(&patch, ",\"greeting\":\"hello, ");
  if (message != NULL) {
    const char *message_end = json_skip(message, end);
    put(&patch, message + 1, (size_t)(message_end - message - 2));
  }
  puts_(&patch, "\"}}");

  controller_string_t patch_json = {(uint8_t *)patch.ptr, patch.len};
  reconciler_api_cluster_json_t returned;
  reconciler_api_cluster_error_t error;
  if (!reconciler_api_cluster_patch_status(&request->ref, &patch_json, &returned, &error)) {
    puts_(&out, "status write failed: ");
    puts_(&out, ERROR_TAGS[error.tag]);
    puts_(&out, ": ");
    put(&out, (const char *)error.val.denied.ptr, error.val.denied.len);
    reconciler_api_cluster_error_free(&error);
    exports_reconciler_api_reconciler_request_free(request);
    return fail(err, RECONCILER_API_TYPES_RECONCILE_ERROR_TRANSIENT, &out);
  }
  reconciler_api_cluster_json_free(&returned);
  free(patch.ptr);

  reconciler_api_cluster_event_t event = {
      .regarding = request->ref,
      .event_type = RECONCILER_API_CLUSTER_EVENT_TYPE_NORMAL,
      .message = {(uint8_t *)greeting.ptr, greeting.len},
  };
  controller_string_set(&event.reason, "Greeted");
  if (!reconciler_api_cluster_record_event(&event, &error)) {
    // An event is a courtesy: a refused one (the guest's event rate) does not fail the reconcile.
    puts_(&out, "event not recorded: ");
    put(&out, (const char *)error.val.denied.ptr, error.val.denied.len);
    log_line(RECONCILER_API_LOG_LEVEL_WARN, out.ptr);
    reconciler_api_cluster_error_free(&error);
    free(out.ptr);
  }
  free(greeting.ptr);
  exports_reconciler_api_reconciler_request_free(request);
  return true;
}
