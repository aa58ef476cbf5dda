// A reconciler written in C on the C SDK (reconciler.h): the greeter, with the same behaviour as
// guests/python/greeter/app.py, pinned by the same fixtures host/tests/fixtures/greeter-*.
//
// Manifest name `greeter`, primary `test.reconciler.dev/v1 Widget`, reconciled only when its
// generation changes. Each reconcile writes `status.observedGeneration` and `status.greeting`
// ("<GREETING or hello>, <spec.message or name>", GREETING from the grant's `env`) and records a
// Normal `Greeted` event. A Widget whose `spec.message` is not a string is a permanent error; a
// failed status write is transient.
#include <stdlib.h>

#include "reconciler.h"

rg_manifest_t manifest(void) {
  return (rg_manifest_t){
      .name = "greeter",
      .primary = {"test.reconciler.dev", "v1", "Widget"},
      .generation_changed_only = true,
  };
}

// Python's names for JSON types: every language's greeter words its errors alike.
static const char *type_name(const rg_json_t *value) {
  switch (rg_json_type(value)) {
    case RG_JSON_STRING: return "str";
    case RG_JSON_NUMBER: return rg_json_is_integer(value) ? "int" : "float";
    case RG_JSON_BOOL: return "bool";
    case RG_JSON_ARRAY: return "list";
    case RG_JSON_OBJECT: return "dict";
    default: return "NoneType";
  }
}

rg_result_t reconcile(rg_request_t *req) {
  const rg_json_t *widget = rg_request_object(req);
  if (widget == NULL) {
    rg_info("gone");
    return rg_await_change();
  }
  const rg_json_t *message = rg_json_path(widget, "spec", "message");
  if (message == NULL) message = rg_json_path(widget, "metadata", "name");
  if (message != NULL && rg_json_type(message) != RG_JSON_STRING)
    return rg_permanent("spec.message must be a string, not %s", type_name(message));
  const char *word = getenv("GREETING");
  const char *greeting = rg_format("%s, %s", word != NULL ? word : "hello",
                                   message != NULL ? rg_json_string(message) : "");
  int64_t generation = 0;
  rg_json_int(rg_json_path(widget, "metadata", "generation"), &generation);

  const char *patch = rg_format("{\"status\":{\"observedGeneration\":%lld,\"greeting\":%s}}",
                                (long long)generation, rg_json_quote(greeting));
  rg_err_t err = rg_cluster_patch_status(&req->ref, patch, NULL);
  if (err != RG_OK)
    return rg_transient("status write failed: %s: %s", rg_err_name(err), rg_last_error());
  rg_event_normal(&req->ref, "Greeted", "%s", greeting);
  return rg_await_change();
}
