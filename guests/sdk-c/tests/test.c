// The C SDK's unit tests, natively against the fake host of ../testing (rg_fake_host.c: the
// generated imports answered from loaded objects); run by ../test.sh, under AddressSanitizer's
// leak checker when the compiler has it, so that a binding string the SDK forgets to free, or
// frees twice, fails the run. The fake's own tests are in fake_host_test.c.
//
// The guest's two functions are defined here and call whatever the test in progress set.
#define _POSIX_C_SOURCE 200809L  // fork, waitpid, pipe, strdup

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef RG_WORLD_H
#define RG_WORLD_H "controller.h"
#endif
#include RG_WORLD_H
#include "check.h"
#include "reconciler_testing.h"
#include "rg_internal.h"

// ---------------------------------------------------------------------------------------------
// The guest, as each test wants it

rg_manifest_t (*guest_manifest)(void);
rg_result_t (*guest_reconcile)(rg_request_t *req);

rg_manifest_t manifest(void) { return guest_manifest(); }
rg_result_t reconcile(rg_request_t *req) { return guest_reconcile(req); }

typedef reconciler_api_types_json_t wit_string_t;  // the world's string type

void *cabi_realloc(void *ptr, size_t old_size, size_t align, size_t new_size);  // the fake's

// As the generated `<world>_string_dup` makes it.
static wit_string_t wit(const char *text) {
  wit_string_t out = {NULL, strlen(text)};
  out.ptr = cabi_realloc(NULL, 0, 1, out.len);
  memcpy(out.ptr, text, out.len);
  return out;
}

// A request as the generated export code hands it over: every string malloc'd.
static exports_reconciler_api_reconciler_request_t request(const char *namespace, const char *name,
                                                           const char *object) {
  exports_reconciler_api_reconciler_request_t r = {
      .ref = {.kind = {wit("test.reconciler.dev"), wit("v1"), wit("Widget")}, .name = wit(name)},
      .attempt = 3,
  };
  if (namespace != NULL) {
    r.ref.namespace_.is_some = true;
    r.ref.namespace_.val = wit(namespace);
  }
  if (object != NULL) {
    r.object.is_some = true;
    r.object.val = wit(object);
  }
  return r;
}

typedef struct outcome {
  bool ok;
  exports_reconciler_api_reconciler_action_t action;
  exports_reconciler_api_reconciler_reconcile_error_t error;
} outcome_t;

static outcome_t run(rg_result_t (*guest)(rg_request_t *), const char *namespace, const char *name,
                     const char *object) {
  guest_reconcile = guest;
  exports_reconciler_api_reconciler_request_t req = request(namespace, name, object);
  outcome_t out = {0};
  out.ok = exports_reconciler_api_reconciler_reconcile(&req, &out.action, &out.error);
  return out;
}

// The error's message, for checking; frees the error as the post-return would.
static const char *message_of(outcome_t *out) {
  static char text[512];
  snprintf(text, sizeof text, "%.*s", (int)out->error.val.transient.len,
           (const char *)out->error.val.transient.ptr);
  exports_reconciler_api_reconciler_reconcile_error_free(&out->error);
  return text;
}

// ---------------------------------------------------------------------------------------------
// Conditions

static rg_condition_t at(int64_t seconds, rg_condition_t c) {
  char text[21];
  rg_rfc3339(seconds, text);
  c.last_transition_time = rg_strndup(text, strlen(text));
  return c;
}

static void conditions_set_adds_a_missing_type(void) {
  rg_conditions_t conditions = {0};
  CHECK(rg_conditions_set(&conditions, rg_condition("Ready", true, "Synced", "ok")));
  CHECK(conditions.len == 1);
  CHECK(rg_conditions_is_true(&conditions, "Ready"));
  CHECK(!rg_conditions_is_true(&conditions, "Degraded"));
  CHECK(rg_conditions_find(&conditions, "Degraded") == NULL);
}

static void conditions_set_keeps_transition_time_while_status_is_unchanged(void) {
  rg_conditions_t conditions = {0};
  rg_conditions_set(&conditions, at(100, rg_condition("Ready", false, "BackendError", "down")));
  CHECK(rg_conditions_set(&conditions,
                          at(200, rg_condition("Ready", false, "BackendError", "still down"))));
  CHECK(conditions.len == 1);
  CHECK_STR(conditions.items[0].last_transition_time, "1970-01-01T00:01:40Z");
  CHECK_STR(conditions.items[0].message, "still down");
}

static void conditions_set_moves_transition_time_when_status_flips(void) {
  rg_conditions_t conditions = {0};
  rg_conditions_set(&conditions, at(100, rg_condition("Ready", false, "BackendError", "down")));
  CHECK(rg_conditions_set(&conditions, at(200, rg_condition("Ready", true, "Synced", "up"))));
  CHECK_STR(conditions.items[0].last_transition_time, "1970-01-01T00:03:20Z");
  CHECK_STR(conditions.items[0].status, "True");
  CHECK_STR(conditions.items[0].reason, "Synced");
}

static void conditions_set_reports_no_change_for_an_identical_condition(void) {
  rg_conditions_t conditions = {0};
  rg_conditions_set(&conditions, at(100, rg_condition("Ready", true, "Synced", "up")));
  CHECK(!rg_conditions_set(&conditions, at(300, rg_condition("Ready", true, "Synced", "up"))));
  CHECK_STR(conditions.items[0].last_transition_time, "1970-01-01T00:01:40Z");
}

static void conditions_observed_generation_always_follows(void) {
  rg_conditions_t conditions = {0};
  rg_condition_t ready = at(100, rg_condition("Ready", true, "Synced", "up"));
  ready.observed_generation = 1;
  rg_conditions_set(&conditions, ready);
  ready = at(200, rg_condition("Ready", true, "Synced", "up"));
  ready.observed_generation = 2;
  CHECK(rg_conditions_set(&conditions, ready));
  CHECK(conditions.items[0].observed_generation == 2);
  CHECK_STR(conditions.items[0].last_transition_time, "1970-01-01T00:01:40Z");
}

static void conditions_are_read_from_an_object_and_written_as_json(void) {
  const char *text =
      "{\"status\":{\"conditions\":["
      "{\"type\":\"Ready\",\"status\":\"False\",\"observedGeneration\":4,"
      "\"lastTransitionTime\":\"2026-01-02T03:04:05Z\",\"reason\":\"Down\",\"message\":\"no\"},"
      "{\"type\":\"Degraded\",\"status\":\"True\",\"lastTransitionTime\":\"2026-01-02T03:04:05Z\","
      "\"reason\":\"Slow\",\"message\":\"a \\\"b\\\"\"}]}}";
  rg_conditions_t conditions = rg_conditions_read(rg_json_parse(text, strlen(text)));
  CHECK(conditions.len == 2);
  CHECK(conditions.items[0].observed_generation == 4);
  CHECK_STR(conditions.items[1].message, "a \"b\"");
  rg_condition_t ready = at(1767323045 + 60, rg_condition("Ready", true, "Up", "yes"));
  ready.observed_generation = 5;
  CHECK(rg_conditions_set(&conditions, ready));
  CHECK_STR(rg_conditions_json(&conditions),
            "[{\"type\":\"Ready\",\"status\":\"True\",\"observedGeneration\":5,"
            "\"lastTransitionTime\":\"2026-01-02T03:05:05Z\",\"reason\":\"Up\",\"message\":\"yes\"},"
            "{\"type\":\"Degraded\",\"status\":\"True\",\"lastTransitionTime\":\"2026-01-02T03:04:05Z\","
            "\"reason\":\"Slow\",\"message\":\"a \\\"b\\\"\"}]");
  CHECK(rg_conditions_read(NULL).len == 0);
  CHECK_STR(rg_conditions_json(&(rg_conditions_t){0}), "[]");
}

static void times_are_rfc3339_in_whole_seconds(void) {
  static const struct {
    int64_t seconds;
    const char *text;
  } cases[] = {
      {0, "1970-01-01T00:00:00Z"},           {1767323045, "2026-01-02T03:04:05Z"},
      {951782400, "2000-02-29T00:00:00Z"},   {-1, "1969-12-31T23:59:59Z"},
      {253402300799, "9999-12-31T23:59:59Z"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char text[21];
    rg_rfc3339(cases[i].seconds, text);
    CHECK_STR(text, cases[i].text);
  }
  const char *now = rg_now();
  CHECK(strlen(now) == 20 && now[10] == 'T' && now[19] == 'Z');
  CHECK_STR(rg_condition("Ready", false, "R", "m").status, "False");
}

// ---------------------------------------------------------------------------------------------
// Errors

static void host_errors_become_transient_or_permanent_by_kind(void) {
  static const struct {
    rg_err_t err;
    const char *name;
    bool transient;
  } cases[] = {
      {RG_CONFLICT, "conflict", true},  {RG_UNAVAILABLE, "unavailable", true},
      {RG_OTHER, "other", true},        {RG_INVALID, "invalid", false},
      {RG_DENIED, "denied", false},     {RG_NOT_FOUND, "not-found", false},
  };
  rg_ref_t ref = {{"", "v1", "ConfigMap"}, "ns", "a"};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    rg_fake_fail_next(NULL, cases[i].err, "ConfigMap ns/a: the host's text");
    bool existed = true;
    rg_err_t err = rg_cluster_delete(&ref, &existed);
    CHECK(err == cases[i].err);
    CHECK(existed);  // untouched on failure
    CHECK_STR(rg_err_name(err), cases[i].name);
    CHECK_STR(rg_last_error(), "ConfigMap ns/a: the host's text");
    CHECK(rg_err_is_transient(err) == cases[i].transient);
    rg_result_t result = rg_from_error(err, "deleting %s", "a");
    CHECK(result.kind == (cases[i].transient ? RG_RESULT_TRANSIENT : RG_RESULT_PERMANENT));
    CHECK_STR(result.message,
              rg_format("deleting a: %s: ConfigMap ns/a: the host's text", cases[i].name));
  }
  CHECK_STR(rg_err_name(RG_OK), "ok");
  // An empty text comes as cabi_realloc's answer to size 0, which is no buffer.
  rg_fake_fail_next("cluster.delete", RG_OTHER, "");
  CHECK(rg_cluster_delete(&ref, NULL) == RG_OTHER);
  CHECK_STR(rg_last_error(), "");
}

static void the_last_error_keeps_its_text_until_the_call_returns(void) {
  rg_ref_t ref = {{"", "v1", "ConfigMap"}, NULL, "a"};
  rg_fake_fail_next("cluster.delete", RG_DENIED, "first");
  rg_cluster_delete(&ref, NULL);
  const char *first = rg_last_error();
  CHECK(rg_cluster_delete(&ref, NULL) == RG_OK);
  CHECK_STR(rg_last_error(), "first");  // a success leaves it
  rg_fake_fail_next("cluster.delete", RG_OTHER, "second");
  rg_cluster_delete(&ref, NULL);
  CHECK_STR(rg_last_error(), "second");
  CHECK_STR(first, "first");
  rg_arena_free();
  CHECK_STR(rg_last_error(), "");
}

// ---------------------------------------------------------------------------------------------
// Manifest

static rg_manifest_t minimal(void) {
  return (rg_manifest_t){.name = "greeter", .primary = {"test.reconciler.dev", "v1", "Widget"}};
}

static rg_manifest_t everything(void) {
  return (rg_manifest_t){
      .name = "network",
      .primary = {"samplecrd.k8s.io", "v1", "Network"},
      .namespace = "net",
      .label_selector = "tier=edge",
      .secondary = {{.kind = {"", "v1", "ConfigMap"}},
                    {.kind = {"apps", "v1", "Deployment"}, .label = "example.com/network"}},
      .finalizer = "samplecrd.k8s.io/bridge",
      .concurrency = 2,
      .resync_seconds = 600,
      .generation_changed_only = true,
  };
}

static const char *text_of(const wit_string_t *s) {
  return rg_strndup((const char *)s->ptr, s->len);
}

static void manifest_defaults_are_all_namespaces_no_secondaries_and_host_concurrency(void) {
  guest_manifest = minimal;
  exports_reconciler_api_reconciler_controller_manifest_t m;
  exports_reconciler_api_reconciler_manifest(&m);
  CHECK_STR(text_of(&m.name), "greeter");
  CHECK_STR(text_of(&m.primary.group), "test.reconciler.dev");
  CHECK_STR(text_of(&m.primary.version), "v1");
  CHECK_STR(text_of(&m.primary.kind), "Widget");
  CHECK(!m.namespace_.is_some && !m.label_selector.is_some && !m.finalizer.is_some);
  CHECK(m.secondary.len == 0);
  CHECK(m.concurrency == 0 && m.resync_seconds == 0 && !m.generation_changed_only);
  exports_reconciler_api_reconciler_controller_manifest_free(&m);  // what the post-return frees
}

static void manifest_carries_every_field_that_was_set(void) {
  guest_manifest = everything;
  exports_reconciler_api_reconciler_controller_manifest_t m;
  exports_reconciler_api_reconciler_manifest(&m);
  CHECK(m.namespace_.is_some && m.label_selector.is_some && m.finalizer.is_some);
  CHECK_STR(text_of(&m.namespace_.val), "net");
  CHECK_STR(text_of(&m.label_selector.val), "tier=edge");
  CHECK_STR(text_of(&m.finalizer.val), "samplecrd.k8s.io/bridge");
  CHECK(m.secondary.len == 2);
  CHECK_STR(text_of(&m.secondary.ptr[0].kind.kind), "ConfigMap");
  CHECK_STR(text_of(&m.secondary.ptr[0].kind.group), "");
  CHECK(m.secondary.ptr[0].mapping.tag == EXPORTS_RECONCILER_API_RECONCILER_MAPPING_OWNER);
  CHECK(m.secondary.ptr[1].mapping.tag == EXPORTS_RECONCILER_API_RECONCILER_MAPPING_LABEL);
  CHECK_STR(text_of(&m.secondary.ptr[1].mapping.val.label), "example.com/network");
  CHECK(m.concurrency == 2 && m.resync_seconds == 600 && m.generation_changed_only);
  exports_reconciler_api_reconciler_controller_manifest_free(&m);
}

// ---------------------------------------------------------------------------------------------
// Request and results

static const rg_json_t *seen[2];
static rg_request_t seen_request;

static rg_result_t ignores_the_object(rg_request_t *req) {
  seen_request = *req;
  return rg_await_change();
}

static rg_result_t reads_the_object_twice(rg_request_t *req) {
  seen[0] = rg_request_object(req);
  seen[1] = rg_request_object(req);
  seen_request = *req;
  return rg_requeue_after_ms(5000);
}

static void the_request_object_is_parsed_lazily_and_once(void) {
  // Not JSON, never asked for: the reconcile does not notice.
  outcome_t out = run(ignores_the_object, "demo", "w1", "{not json");
  CHECK(out.ok && !out.action.requeue_after_ms.is_some);
  CHECK_STR(rg_fake_calls(), "");

  out = run(reads_the_object_twice, "demo", "w1", "{\"spec\":{\"message\":\"hi\"}}");
  CHECK(out.ok && out.action.requeue_after_ms.is_some && out.action.requeue_after_ms.val == 5000);
  CHECK(seen[0] != NULL && seen[0] == seen[1]);

  out = run(reads_the_object_twice, NULL, "gone", NULL);
  CHECK(out.ok && seen[0] == NULL && seen_request.object_json == NULL);
}

static const char *seen_text[6];

static rg_result_t records_the_request(rg_request_t *req) {
  rg_key_t key = rg_request_key(req);
  seen_text[0] = rg_format("%s|%s|%s|%s|%s", req->ref.kind.group, req->ref.kind.version,
                           req->ref.kind.kind, req->ref.namespace ? req->ref.namespace : "(none)",
                           req->ref.name);
  seen_text[1] = rg_format("%s/%s %u %d", key.namespace ? key.namespace : "(none)", key.name,
                           req->attempt, req->deleting);
  seen_text[2] = rg_format("%zu %s", req->object_json_len, req->object_json);
  // Everything above is in the arena, gone after the call: keep copies.
  for (int i = 0; i < 3; i++) seen_text[i] = strdup(seen_text[i]);
  return rg_permanent("spec.message must be a string, not %s", "int");
}

static void the_request_carries_ref_key_attempt_and_text(void) {
  outcome_t out = run(records_the_request, "demo", "w1", "{\"a\":1}");
  CHECK(!out.ok);
  CHECK(out.error.tag == RECONCILER_API_TYPES_RECONCILE_ERROR_PERMANENT);
  CHECK_STR(message_of(&out), "spec.message must be a string, not int");
  CHECK_STR(seen_text[0], "test.reconciler.dev|v1|Widget|demo|w1");
  CHECK_STR(seen_text[1], "demo/w1 3 0");
  CHECK_STR(seen_text[2], "7 {\"a\":1}");
  for (int i = 0; i < 3; i++) free((void *)seen_text[i]);

  out = run(records_the_request, NULL, "cluster-wide", NULL);
  CHECK_STR(seen_text[0], "test.reconciler.dev|v1|Widget|(none)|cluster-wide");
  CHECK_STR(seen_text[2], "0 (null)");
  message_of(&out);
  for (int i = 0; i < 3; i++) free((void *)seen_text[i]);
}

static rg_result_t fails_transiently(rg_request_t *req) {
  (void)req;
  return rg_transient("backend %s is down (%d tries)", "db", 3);
}

static void results_become_the_wit_result(void) {
  outcome_t out = run(fails_transiently, "demo", "w1", "{}");
  CHECK(!out.ok && out.error.tag == RECONCILER_API_TYPES_RECONCILE_ERROR_TRANSIENT);
  CHECK_STR(message_of(&out), "backend db is down (3 tries)");
  CHECK(rg_await_change().kind == RG_RESULT_OK && !rg_await_change().requeue);
}

static rg_result_t reads_text_that_is_not_json(rg_request_t *req) {
  rg_request_object(req);
  return rg_await_change();
}

static void an_object_that_is_not_json_traps_after_logging_why(void) {
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    run(reads_text_that_is_not_json, "demo", "w1", "{\"a\" 1}");
    _exit(0);  // not reached
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

// ---------------------------------------------------------------------------------------------
// Host calls

#define WIDGET_W1                                                                               \
  "{\"apiVersion\":\"test.reconciler.dev/v1\",\"kind\":\"Widget\",\"metadata\":{\"namespace\":" \
  "\"demo\",\"name\":\"w1\"}}"

static rg_result_t greets(rg_request_t *req) {
  const char *name = rg_json_string(rg_json_path(rg_request_object(req), "metadata", "name"));
  rg_err_t err = rg_cluster_patch_status(
      &req->ref, rg_format("{\"status\":{\"greeting\":%s}}", rg_json_quote(name)), NULL);
  if (err != RG_OK) return rg_from_error(err, "status write");
  rg_event_normal(&req->ref, "Greeted", "hello, %s", name);
  return rg_await_change();
}

static void cluster_writes_and_events_reach_the_host_as_written(void) {
  rg_fake_load(WIDGET_W1);
  outcome_t out = run(greets, "demo", "w1", "{\"metadata\":{\"name\":\"w1\"}}");
  CHECK(out.ok);
  CHECK_STR(rg_fake_calls(),
            "cluster.patch-status test.reconciler.dev/v1/Widget demo/w1 "
            "{\"status\":{\"greeting\":\"w1\"}}\n"
            "cluster.record-event Normal Greeted test.reconciler.dev/v1/Widget demo/w1: hello, "
            "w1\n");

  // A refused event is logged, not returned.
  rg_fake_reset();
  rg_ref_t ref = {{"", "v1", "ConfigMap"}, "ns", "a"};
  rg_fake_fail_next("cluster.record-event", RG_UNAVAILABLE, "event rate exceeded");
  rg_event_warning(&ref, "Broken", "%d things", 2);
  CHECK_STR(rg_fake_calls(),
            "cluster.record-event Warning Broken v1/ConfigMap ns/a: 2 things\n"
            "log warn could not record event Broken on ConfigMap ns/a: unavailable: event rate "
            "exceeded\n");
}

static void a_failed_write_is_an_error_with_the_hosts_kind_and_text(void) {
  rg_fake_fail_next("cluster.patch-status", RG_CONFLICT, "Widget demo/w1 changed");
  outcome_t out = run(greets, "demo", "w1", "{\"metadata\":{\"name\":\"w1\"}}");
  CHECK(!out.ok && out.error.tag == RECONCILER_API_TYPES_RECONCILE_ERROR_TRANSIENT);
  CHECK_STR(message_of(&out), "status write: conflict: Widget demo/w1 changed");
  CHECK_STR(rg_fake_writes(),  // no event
            "cluster.patch-status test.reconciler.dev/v1/Widget demo/w1 "
            "{\"status\":{\"greeting\":\"w1\"}}\n");
}

static void returned_objects_are_parsed_only_when_asked_for(void) {
  rg_ref_t ref = {{"", "v1", "ConfigMap"}, "ns", "a"};
  rg_fake_answer_next("cluster.patch-status", "not JSON, and never parsed");
  CHECK(rg_cluster_patch_status(&ref, "{\"status\":{}}", NULL) == RG_OK);

  const rg_json_t *returned = NULL;
  rg_fake_answer_next("cluster.apply", "{\"metadata\":{\"resourceVersion\":\"7\"}}");
  CHECK(rg_cluster_apply("{\"apiVersion\":\"v1\"}", &returned) == RG_OK);
  CHECK_STR(rg_json_string(rg_json_path(returned, "metadata", "resourceVersion")), "7");
  CHECK_STR(rg_fake_writes(),
            "cluster.patch-status v1/ConfigMap ns/a {\"status\":{}}\n"
            "cluster.apply {\"apiVersion\":\"v1\"}\n");

  rg_fake_fail_next("cluster.apply", RG_INVALID, "metadata.name: required");
  CHECK(rg_cluster_apply("{}", &returned) == RG_INVALID);
  CHECK(returned == NULL);

  bool existed = true;
  CHECK(rg_cluster_delete(&ref, &existed) == RG_OK && !existed);  // nothing loaded
}

static void apply_with_sends_the_fields_and_the_force_asked_for(void) {
  const char *fields = "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\"}";
  const rg_json_t *returned = NULL;
  rg_fake_answer_next("cluster.apply-with", "{\"metadata\":{\"resourceVersion\":\"8\"}}");
  CHECK(rg_cluster_apply_with(fields, (rg_apply_options_t){0}, &returned) == RG_OK);
  CHECK_STR(rg_json_string(rg_json_path(returned, "metadata", "resourceVersion")), "8");
  rg_fake_answer_next("cluster.apply-with", "{}");
  CHECK(rg_cluster_apply_with(fields, (rg_apply_options_t){.force = true}, NULL) == RG_OK);
  CHECK_STR(rg_fake_calls(),
            "cluster.apply-with force=false {\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\"}\n"
            "cluster.apply-with force=true {\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\"}\n");

  const char *conflict = "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas";
  rg_fake_fail_next("cluster.apply-with", RG_CONFLICT, conflict);
  CHECK(rg_cluster_apply_with(fields, (rg_apply_options_t){0}, &returned) == RG_CONFLICT);
  CHECK(returned == NULL);
  CHECK_STR(rg_last_error(), conflict);
}

static void the_lister_reads_one_object_or_a_list_as_json(void) {
  rg_ref_t ref = {{"", "v1", "ConfigMap"}, "ns", "a"};
  const rg_json_t *object = (const rg_json_t *)&ref;  // to see it set
  CHECK(rg_lister_get(&ref, &object) == RG_OK && object == NULL);
  rg_fake_load(
      "[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\","
      "\"namespace\":\"ns\",\"labels\":{\"app\":\"web\"}},\"data\":{\"k\":\"v\"}},"
      "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":\"b\"}}]");
  CHECK(rg_lister_get(&ref, &object) == RG_OK);
  CHECK_STR(rg_json_string(rg_json_path(object, "data", "k")), "v");

  const rg_json_t *list = NULL;
  CHECK(rg_lister_list((rg_gvk_t){"", "v1", "ConfigMap"}, "ns", "app=web", &list) == RG_OK);
  CHECK(rg_json_type(list) == RG_JSON_ARRAY && rg_json_len(list) == 1);
  rg_ref_t found;
  CHECK(rg_ref_from_json(rg_json_first(list), &found));
  CHECK_STR(found.namespace, "ns");
  CHECK_STR(found.kind.group, "");
  CHECK_STR(rg_gvk_api_version(found.kind), "v1");
  CHECK(rg_lister_list((rg_gvk_t){"apps", "v1", "Deployment"}, NULL, NULL, &list) == RG_OK);
  CHECK(rg_ref_from_json(rg_json_at(list, 0), &found));
  CHECK_STR(found.kind.group, "apps");
  CHECK_STR(found.kind.version, "v1");
  CHECK(found.namespace == NULL);
  CHECK_STR(rg_gvk_api_version((rg_gvk_t){"apps", "v1", "Deployment"}), "apps/v1");
  CHECK(!rg_ref_from_json(rg_json_parse("{\"kind\":\"X\"}", 12), &found));

  CHECK(rg_lister_list((rg_gvk_t){"", "v1", "Secret"}, NULL, NULL, &list) == RG_OK);
  CHECK(rg_json_len(list) == 0);

  CHECK(rg_lister_list((rg_gvk_t){"", "v1", "Secret"}, NULL, "!!", &list) == RG_INVALID);
  CHECK(list == NULL);
  CHECK_STR(rg_last_error(),
            "label-selector: invalid label selector \"!!\" at byte 1: expected a label key, found "
            "'!'");
  CHECK_STR(rg_fake_calls(),
            "lister.get v1/ConfigMap ns/a\n"
            "lister.get v1/ConfigMap ns/a\n"
            "lister.list v1/ConfigMap namespace=ns selector=app=web\n"
            "lister.list apps/v1/Deployment namespace=(all) selector=(all)\n"
            "lister.list v1/Secret namespace=(all) selector=(all)\n"
            "lister.list v1/Secret namespace=(all) selector=!!\n");
}

static void the_queue_takes_keys_with_and_without_delay(void) {
  CHECK(rg_queue_enqueue((rg_key_t){"demo", "w2"}) == RG_OK);
  CHECK(rg_queue_enqueue_after_ms((rg_key_t){NULL, "cluster-wide"}, 1500) == RG_OK);
  rg_fake_fail_next("queue.enqueue", RG_UNAVAILABLE, "10000 keys waiting");
  CHECK(rg_queue_enqueue((rg_key_t){"demo", "w3"}) == RG_UNAVAILABLE);
  CHECK_STR(rg_fake_writes(),
            "queue.enqueue demo/w2 after=none\n"
            "queue.enqueue cluster-wide after=1500\n"
            "queue.enqueue demo/w3 after=none\n");
}

static void log_lines_are_formatted_at_their_level(void) {
  rg_trace("t");
  rg_debug("d %d", 1);
  rg_info("reconciling %s/%s", "demo", "w1");
  rg_warn("w");
  rg_error("e %s", "!");
  CHECK_STR(rg_fake_logs(),
            "log trace t\n"
            "log debug d 1\n"
            "log info reconciling demo/w1\n"
            "log warn w\n"
            "log error e !\n");
  CHECK_STR(rg_fake_writes(), "");
}

// ---------------------------------------------------------------------------------------------
// JSON

static const rg_json_t *parse(const char *text) { return rg_json_parse(text, strlen(text)); }

static void json_reads_objects_arrays_and_scalars(void) {
  const rg_json_t *v = parse(
      " {\"metadata\": {\"name\": \"w1\", \"generation\": 7},\n"
      "  \"spec\": {\"replicas\": -3, \"ratio\": 1.5e2, \"on\": true, \"off\": false, \"none\": null,"
      "  \"items\": [1, \"two\", [3], {}], \"big\": 9223372036854775807,"
      " \"bigger\": 9223372036854775808, \"low\": -9223372036854775808}} ");
  CHECK(rg_json_type(v) == RG_JSON_OBJECT && rg_json_len(v) == 2);
  CHECK_STR(rg_json_string(rg_json_path(v, "metadata", "name")), "w1");
  int64_t n = 0;
  CHECK(rg_json_int(rg_json_path(v, "metadata", "generation"), &n) && n == 7);
  const rg_json_t *spec = rg_json_get(v, "spec");
  CHECK(rg_json_int(rg_json_get(spec, "replicas"), &n) && n == -3);
  n = 42;
  CHECK(!rg_json_int(rg_json_get(spec, "ratio"), &n) && n == 42);
  CHECK(!rg_json_is_integer(rg_json_get(spec, "ratio")));
  CHECK_STR(rg_json_number_text(rg_json_get(spec, "ratio")), "1.5e2");
  CHECK(rg_json_int(rg_json_get(spec, "big"), &n) && n == INT64_MAX);
  CHECK(!rg_json_int(rg_json_get(spec, "bigger"), &n) && rg_json_is_integer(rg_json_get(spec, "bigger")));
  CHECK(rg_json_int(rg_json_get(spec, "low"), &n) && n == INT64_MIN);
  bool b = false;
  CHECK(rg_json_bool(rg_json_get(spec, "on"), &b) && b);
  CHECK(rg_json_bool(rg_json_get(spec, "off"), &b) && !b);
  CHECK(!rg_json_bool(rg_json_get(spec, "none"), &b));
  CHECK(rg_json_type(rg_json_get(spec, "none")) == RG_JSON_NULL);
  CHECK(rg_json_type(rg_json_get(spec, "missing")) == RG_JSON_ABSENT);

  const rg_json_t *items = rg_json_get(spec, "items");
  CHECK(rg_json_len(items) == 4);
  CHECK_STR(rg_json_string(rg_json_at(items, 1)), "two");
  CHECK(rg_json_type(rg_json_at(items, 2)) == RG_JSON_ARRAY);
  CHECK(rg_json_at(items, 4) == NULL);
  size_t count = 0;
  for (const rg_json_t *item = rg_json_first(items); item; item = rg_json_next(item)) count++;
  CHECK(count == 4);
  CHECK(rg_json_key(rg_json_first(items)) == NULL);
  CHECK_STR(rg_json_key(rg_json_first(spec)), "replicas");

  // NULL-tolerant all the way down.
  CHECK(rg_json_path(NULL, "a", "b") == NULL);
  CHECK(rg_json_get(items, "a") == NULL && rg_json_len(NULL) == 0 && rg_json_first(NULL) == NULL);
  CHECK(rg_json_string(NULL) == NULL && rg_json_string(items) == NULL);
}

static void json_decodes_escapes_and_unicode(void) {
  const rg_json_t *v =
      parse("\"w\\u00f6rld \\\"q\\\" back\\\\slash\\ttab \\u2603 \\ud83d\\ude00 \\/ \\ud800!\"");
  CHECK_STR(rg_json_string(v), "w\xc3\xb6rld \"q\" back\\slash\ttab \xe2\x98\x83 \xf0\x9f\x98\x80 / \xef\xbf\xbd!");
  v = parse("\"a\\u0000b\"");
  CHECK(rg_json_string_len(v) == 3 && memcmp(rg_json_string(v), "a\0b", 3) == 0);
  CHECK_STR(rg_json_serialize(v), "\"a\\u0000b\"");
  CHECK_STR(rg_json_string(parse("\"w\xc3\xb6rld\"")), "w\xc3\xb6rld");
  // Member names are decoded too, when an escape asks for it.
  v = parse("{\"a\\u0062\":1,\"ab\":2}");
  int64_t n = 0;
  CHECK(rg_json_int(rg_json_get(v, "ab"), &n) && n == 1);
  CHECK_STR(rg_json_key(rg_json_at(v, 1)), "ab");
}

static void json_parse_keeps_no_reference_to_the_callers_text(void) {
  char text[] = "{\"a\":\"b\",\"n\":12}";
  const rg_json_t *v = rg_json_parse(text, strlen(text));
  memset(text, 'x', sizeof text - 1);
  CHECK_STR(rg_json_string(rg_json_get(v, "a")), "b");
  CHECK_STR(rg_json_number_text(rg_json_get(v, "n")), "12");
}

static void json_refuses_what_is_not_json_and_says_where(void) {
  static const char *const bad[] = {
      "",        "{",          "{\"a\" 1}",  "{\"a\":1,}", "[1,]",   "[1 2]",     "tru",
      "01x",     "1.",         "-",          "\"abc",      "\"\\x\"", "\"\\u12\"", "{} {}",
      "{a:1}",   "\"a\nb\"",   "nul",        "[",          "1e",     "+1",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    if (rg_json_parse(bad[i], strlen(bad[i])) != NULL) {
      failures++;
      fprintf(stderr, "%s: parsed %s\n", current, bad[i]);
    }
  }
  CHECK(parse("{\"a\" 1}") == NULL);
  CHECK_STR(rg_last_error(), "not JSON: expected ':' at byte 5");

  char deep[2 * 600 + 1];
  memset(deep, '[', 600);
  memset(deep + 600, ']', 600);
  deep[1200] = '\0';
  CHECK(parse(deep) == NULL);
  CHECK_STR(rg_last_error(), "not JSON: nested too deeply at byte 512");
  CHECK(rg_json_parse(deep + 88, 1200 - 2 * 88) != NULL);  // 512 levels are fine
}

static void json_serializes_values_and_quotes_strings(void) {
  const char *text =
      "{\"a\":[1,-2.5e3,true,false,null,{}],\"b\":{\"c\":\"d\\\"\\n\\u0001\"},\"e\":[]}";
  CHECK_STR(rg_json_serialize(parse(text)), text);
  CHECK_STR(rg_json_serialize(parse(" { \"a\" : [ 1 , 2 ] } ")), "{\"a\":[1,2]}");
  CHECK_STR(rg_json_serialize(NULL), "null");
  CHECK_STR(rg_json_quote("a \"b\" \\ \t\r\n\b\f \x1f w\xc3\xb6rld"),
            "\"a \\\"b\\\" \\\\ \\t\\r\\n\\b\\f \\u001f w\xc3\xb6rld\"");
  CHECK_STR(rg_json_quote(""), "\"\"");
  CHECK_STR(rg_json_quote_n("a\0b", 3), "\"a\\u0000b\"");
}

// ---------------------------------------------------------------------------------------------
// Formatting

static void format_covers_what_messages_use(void) {
  CHECK_STR(rg_format("plain"), "plain");
  CHECK_STR(rg_format("%s=%d, %u %i %%", "a", -12, 7u, 0), "a=-12, 7 0 %");
  CHECK_STR(rg_format("%ld %lld %lu %llu", -1L, -9223372036854775807LL - 1, 1UL << 31,
                      18446744073709551615ULL),
            "-1 -9223372036854775808 2147483648 18446744073709551615");
  CHECK_STR(rg_format("%zu %zd %x %X %hhu %hd", (size_t)42, (ptrdiff_t)-3, 255u, 48879u,
                      (unsigned char)200, (short)-5),
            "42 -3 ff BEEF 200 -5");
  CHECK_STR(rg_format("[%5d|%-5d|%05d|%+d|% d|%.3d|%5.3d]", 42, 42, -42, 42, 42, 7, 7),
            "[   42|42   |-0042|+42| 42|007|  007]");
  CHECK_STR(rg_format("[%5s|%-5s|%.2s|%.*s|%*s]", "ab", "ab", "abc", 1, "xyz", 3, "z"),
            "[   ab|ab   |ab|x|  z]");
  const char *volatile nothing = NULL;  // unknown to the compiler's format check
  CHECK_STR(rg_format("%c%c %s", 'o', 'k', nothing), "ok (null)");
  CHECK_STR(rg_format("%f then %d", 1.5, 3), "? then 3");
  CHECK_STR(rg_format("%p", (void *)0x1f), "0x1f");
  CHECK_STR(rg_format("%jd %td", (intmax_t)-1, (ptrdiff_t)2), "-1 2");
  char long_text[5000];
  memset(long_text, 'x', sizeof long_text - 1);
  long_text[sizeof long_text - 1] = '\0';
  CHECK(strlen(rg_format("%s%s", long_text, long_text)) == 2 * (sizeof long_text - 1));
}

static void arena_memory_is_aligned_and_survives_large_requests(void) {
  for (size_t size = 1; size < 100000; size = size * 3 + 1) {
    char *p = rg_alloc(size);
    CHECK(((uintptr_t)p & 7) == 0);
    memset(p, 1, size);
  }
  CHECK_STR(rg_strndup("abcdef", 3), "abc");
}

// ---------------------------------------------------------------------------------------------
// Watches: the optional `watches` export (world watching-controller), or its absence

// Runs `fn` in a child process; true when it aborted. `log` gets the lines it logged before.
static bool traps(void (*fn)(void), char *log, size_t cap) {
  int fds[2];
  if (pipe(fds) != 0) abort();
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    rg_fake_log_fd(fds[1]);
    fn();
    _exit(0);
  }
  close(fds[1]);
  int status = 0;
  waitpid(child, &status, 0);
  ssize_t len = read(fds[0], log, cap - 1);
  log[len > 0 ? len : 0] = '\0';
  close(fds[0]);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static bool maps_to_two_mirrors(const rg_json_t *object, rg_keys_t *keys) {
  const char *namespace = rg_json_string(rg_json_path(object, "metadata", "namespace"));
  rg_keys_add(keys, namespace, "m1");
  rg_keys_add(keys, namespace, "m2");
  return true;
}

static bool maps_to_one_known_and_one_cluster_wide(const rg_json_t *object, rg_keys_t *keys) {
  (void)object;
  rg_keys_add(keys, "demo", "m2");
  rg_keys_add(keys, NULL, "cluster-wide");
  return true;
}

static bool must_not_be_called(const rg_json_t *object, rg_keys_t *keys) {
  (void)object;
  (void)keys;
  failures++;
  fprintf(stderr, "%s: a map function of another kind was called\n", current);
  return true;
}

static rg_manifest_t watching(void) {
  return (rg_manifest_t){
      .name = "mirror",
      .primary = {"mirror.reconciler.dev", "v1alpha1", "Mirror"},
      .watches =
          {
              {.kind = {"", "v1", "ConfigMap"}, .mapping = RG_MAP_FIELD, .field = "spec.source"},
              {.kind = {"", "v1", "ConfigMap"},
               .mapping = RG_MAP_OWNER_LABELS,
               .namespace_label = "o/namespace",
               .label = "o/name",
               .label_selector = "o/name"},
              [3] = {.kind = {"", "v1", "Namespace"},
                     .mapping = RG_MAP_FIELD,
                     .field = "spec.targetNamespaces[*]",
                     .value = RG_INDEX_NAMESPACED_NAME},
              {.kind = {"", "v1", "ConfigMap"}, .mapping = RG_MAP_FUNCTION, .map = maps_to_two_mirrors},
              {.kind = {"", "v1", "Secret"}, .mapping = RG_MAP_FUNCTION, .map = must_not_be_called},
              {.kind = {"", "v1", "ConfigMap"},
               .mapping = RG_MAP_FUNCTION,
               .map = maps_to_one_known_and_one_cluster_wide,
               .namespace = "demo"},
              {.kind = {"", "v1", "Pod"}, .mapping = RG_MAP_LABEL, .label = "mirror"},
              {.kind = {"", "v1", "Service"}, .namespace = "demo"},
              {.kind = {"", "v1", "Node"}, .mapping = RG_MAP_OWNER_LABELS, .label = "o/name"},
          },
  };
}

static void load_manifest(void) {
  exports_reconciler_api_reconciler_controller_manifest_t m;
  exports_reconciler_api_reconciler_manifest(&m);
  exports_reconciler_api_reconciler_controller_manifest_free(&m);
}

#ifdef EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_OWNER
static void a_manifest_with_watches_loads_where_the_component_exports_them(void) {
  guest_manifest = watching;
  load_manifest();
  CHECK_STR(rg_fake_calls(), "");
}

static void watches_are_the_contracts_records_with_unset_entries_skipped(void) {
  guest_manifest = watching;
  exports_reconciler_api_watches_list_watch_t list;
  exports_reconciler_api_watches_watches(&list);
  CHECK(list.len == 9);
  if (list.len == 9) {
    exports_reconciler_api_watches_watch_t *w = list.ptr;
    CHECK_STR(text_of(&w[0].kind.kind), "ConfigMap");
    CHECK(w[0].mapping.tag == EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_FIELD);
    CHECK_STR(text_of(&w[0].mapping.val.field.field), "spec.source");
    CHECK(w[0].mapping.val.field.value == EXPORTS_RECONCILER_API_WATCHES_INDEX_VALUE_NAME);
    CHECK(!w[0].namespace_.is_some && !w[0].label_selector.is_some);
    CHECK(w[1].mapping.tag == EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_OWNER_LABELS);
    CHECK(w[1].mapping.val.owner_labels.namespace_.is_some);
    CHECK_STR(text_of(&w[1].mapping.val.owner_labels.namespace_.val), "o/namespace");
    CHECK_STR(text_of(&w[1].mapping.val.owner_labels.name), "o/name");
    CHECK(w[1].label_selector.is_some);
    CHECK_STR(text_of(&w[1].label_selector.val), "o/name");
    CHECK_STR(text_of(&w[2].kind.kind), "Namespace");  // [2] was unset
    CHECK(w[2].mapping.val.field.value == EXPORTS_RECONCILER_API_WATCHES_INDEX_VALUE_NAMESPACED_NAME);
    CHECK(w[3].mapping.tag == EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_FUNCTION);
    CHECK(w[5].namespace_.is_some);
    CHECK_STR(text_of(&w[5].namespace_.val), "demo");
    CHECK(w[6].mapping.tag == EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_LABEL);
    CHECK_STR(text_of(&w[6].mapping.val.label), "mirror");
    CHECK(w[7].mapping.tag == EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_OWNER);
    CHECK(w[8].mapping.tag == EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_OWNER_LABELS);
    CHECK(!w[8].mapping.val.owner_labels.namespace_.is_some);
  }
  exports_reconciler_api_watches_list_watch_free(&list);  // what the post-return frees
}

static rg_manifest_t label_watch_without_a_label(void) {
  rg_manifest_t m = watching();
  m.watches[7].label = NULL;
  return m;
}

static void export_the_incomplete_watches(void) {
  guest_manifest = label_watch_without_a_label;
  exports_reconciler_api_watches_list_watch_t list;
  exports_reconciler_api_watches_watches(&list);
}

static void an_incomplete_watch_traps_naming_what_it_lacks(void) {
  char log[1024];
  CHECK(traps(export_the_incomplete_watches, log, sizeof log));
  CHECK_STR(log, "log error watches[7] (Pod) has no .label for its mapping 1\n");
}

static void map_calls_the_functions_of_the_kind_and_gives_each_key_once(void) {
  guest_manifest = watching;
  CHECK_STR(rg_fake_map((rg_gvk_t){"", "v1", "ConfigMap"},
                        "{\"metadata\":{\"namespace\":\"demo\",\"name\":\"a\"}}"),
            "demo/m1\ndemo/m2\ncluster-wide\n");
  CHECK_STR(rg_fake_calls(), "");
}

static void map_of_a_kind_without_a_function_warns_and_gives_no_keys(void) {
  guest_manifest = watching;
  CHECK_STR(rg_fake_map((rg_gvk_t){"", "v1", "Namespace"}, "{}"), "");
  CHECK_STR(rg_fake_calls(),
            "log warn map was called for Namespace v1, which no RG_MAP_FUNCTION watch declares: "
            "no keys\n");
}

static bool fails_to_map(const rg_json_t *object, rg_keys_t *keys) {
  (void)object;
  (void)keys;
  rg_error("spec.owner is missing");
  return false;
}

static rg_manifest_t failing_map(void) {
  rg_manifest_t m = watching();
  m.watches[4].map = fails_to_map;
  m.watches[4].kind.kind = "ConfigMap";
  return m;
}

static void map_with_a_failing_function(void) {
  guest_manifest = failing_map;
  rg_fake_map((rg_gvk_t){"", "v1", "ConfigMap"},
              "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"namespace\":\"demo\","
              "\"name\":\"a\"}}");
}

static void a_failed_map_traps_naming_the_object_after_the_guests_reason(void) {
  char log[1024];
  CHECK(traps(map_with_a_failing_function, log, sizeof log));
  CHECK_STR(log,
            "log error spec.owner is missing\n"
            "log error map ConfigMap demo/a: the map function of watches[4] failed\n");
}
#else
static void a_manifest_with_watches_traps_in_a_world_without_the_export(void) {
  guest_manifest = watching;
  char log[1024];
  CHECK(traps(load_manifest, log, sizeof log));
  CHECK_STR(log,
            "log error the manifest declares 9 watches, but this component does not export "
            "reconciler:api/watches: build it for the world `watching-controller` (a `wit-world` "
            "file beside the guest's .c files holding that name)\n");
}
#endif

// ---------------------------------------------------------------------------------------------
// Computed indexes: the optional `indexes` export (world indexing-controller), or its absence

#define CONFIG_MAPS_ANNOTATION "test.reconciler.dev/configmaps"

// The ConfigMaps a Widget's annotation lists ("a,b"), each once; NULL entries are ignored.
static bool config_maps_of(const rg_json_t *widget, rg_values_t *values) {
  const char *list = rg_json_string(
      rg_json_path(widget, "metadata", "annotations", CONFIG_MAPS_ANNOTATION));
  for (const char *p = list; p != NULL && *p != '\0';) {
    size_t len = strcspn(p, ",");
    rg_values_add(values, rg_strndup(p, len));
    p += len + (p[len] == ',');
  }
  rg_values_add(values, NULL);
  return true;
}

// The Widget's own namespace/name, for a lookup by namespaced name.
static bool own_name(const rg_json_t *widget, rg_values_t *values) {
  const rg_json_t *metadata = rg_json_get(widget, "metadata");
  rg_values_add(values, rg_format("%s/%s", rg_json_string(rg_json_get(metadata, "namespace")),
                                  rg_json_string(rg_json_get(metadata, "name"))));
  return true;
}

static rg_manifest_t indexing(void) {
  return (rg_manifest_t){
      .name = "reloader",
      .primary = {"test.reconciler.dev", "v1", "Widget"},
      .indexes =
          {
              {.name = "configmaps", .kind = {"", "v1", "ConfigMap"}, .index = config_maps_of},
              [2] = {.name = "secrets",
                     .kind = {"", "v1", "Secret"},
                     .lookup = RG_LOOKUP_NAMESPACED_NAME,
                     .index = own_name,
                     .namespace = "demo",
                     .label_selector = "reloader=yes"},
          },
  };
}

#ifdef EXPORTS_RECONCILER_API_INDEXES_LOOKUP_NAME
static const char *const ANNOTATED =
    "{\"apiVersion\":\"test.reconciler.dev/v1\",\"kind\":\"Widget\",\"metadata\":{\"namespace\":"
    "\"demo\",\"name\":\"w1\",\"annotations\":{\"" CONFIG_MAPS_ANNOTATION "\":\"b,a,b\"}}}";

static void a_manifest_with_indexes_loads_where_the_component_exports_them(void) {
  guest_manifest = indexing;
  load_manifest();
  CHECK_STR(rg_fake_calls(), "");
}

static void indexes_are_the_contracts_records_with_unset_entries_skipped(void) {
  guest_manifest = indexing;
  exports_reconciler_api_indexes_list_computed_index_t list;
  exports_reconciler_api_indexes_indexes(&list);
  CHECK(list.len == 2);
  if (list.len == 2) {
    exports_reconciler_api_indexes_computed_index_t *x = list.ptr;
    CHECK_STR(text_of(&x[0].name), "configmaps");
    CHECK_STR(text_of(&x[0].kind.group), "");
    CHECK_STR(text_of(&x[0].kind.version), "v1");
    CHECK_STR(text_of(&x[0].kind.kind), "ConfigMap");
    CHECK(x[0].lookup == EXPORTS_RECONCILER_API_INDEXES_LOOKUP_NAME);
    CHECK(!x[0].namespace_.is_some && !x[0].label_selector.is_some);
    CHECK_STR(text_of(&x[1].name), "secrets");  // [1] was unset
    CHECK(x[1].lookup == EXPORTS_RECONCILER_API_INDEXES_LOOKUP_NAMESPACED_NAME);
    CHECK(x[1].namespace_.is_some && x[1].label_selector.is_some);
    CHECK_STR(text_of(&x[1].namespace_.val), "demo");
    CHECK_STR(text_of(&x[1].label_selector.val), "reloader=yes");
  }
  exports_reconciler_api_indexes_list_computed_index_free(&list);  // what the post-return frees
  // A world with `indexes` has `watches` too, answered with none here.
  exports_reconciler_api_watches_list_watch_t watches;
  exports_reconciler_api_watches_watches(&watches);
  CHECK(watches.len == 0);
  exports_reconciler_api_watches_list_watch_free(&watches);
}

static void index_calls_the_function_of_the_index_named_and_gives_each_value_once(void) {
  guest_manifest = indexing;
  CHECK_STR(rg_fake_index("configmaps", ANNOTATED), "b\na\n");
  CHECK_STR(rg_fake_index("secrets", ANNOTATED), "demo/w1\n");
  CHECK_STR(rg_fake_index("configmaps", "{\"metadata\":{}}"), "");
  CHECK_STR(rg_fake_calls(), "");
}

static void index_of_a_name_no_index_declares_warns_and_gives_no_values(void) {
  guest_manifest = indexing;
  CHECK_STR(rg_fake_index("other", ANNOTATED), "");
  CHECK_STR(rg_fake_calls(),
            "log warn index was called for `other`, which no entry of .indexes declares: no "
            "values\n");
}

static rg_manifest_t index_without_a_function(void) {
  rg_manifest_t m = indexing();
  m.indexes[2].index = NULL;
  return m;
}

static void export_the_incomplete_indexes(void) {
  guest_manifest = index_without_a_function;
  exports_reconciler_api_indexes_list_computed_index_t list;
  exports_reconciler_api_indexes_indexes(&list);
}

static rg_manifest_t index_without_a_kind(void) {
  rg_manifest_t m = indexing();
  m.indexes[5] = (rg_index_t){.name = "half", .index = own_name};
  return m;
}

static void export_the_kindless_index(void) {
  guest_manifest = index_without_a_kind;
  exports_reconciler_api_indexes_list_computed_index_t list;
  exports_reconciler_api_indexes_indexes(&list);
}

static void an_incomplete_index_traps_naming_what_it_lacks(void) {
  char log[1024];
  CHECK(traps(export_the_incomplete_indexes, log, sizeof log));
  CHECK_STR(log, "log error indexes[2] (secrets) has no .index function\n");
  CHECK(traps(export_the_kindless_index, log, sizeof log));
  CHECK_STR(log, "log error indexes[5] (half) has no .kind\n");
}

static bool fails_to_index(const rg_json_t *primary, rg_values_t *values) {
  (void)primary;
  (void)values;
  rg_error("metadata.annotations is not an object");
  return false;
}

static rg_manifest_t failing_index(void) {
  rg_manifest_t m = indexing();
  m.indexes[2].index = fails_to_index;
  return m;
}

static void index_with_a_failing_function(void) {
  guest_manifest = failing_index;
  rg_fake_index("secrets", ANNOTATED);
}

static void a_failed_index_traps_naming_the_primary_after_the_guests_reason(void) {
  char log[1024];
  CHECK(traps(index_with_a_failing_function, log, sizeof log));
  CHECK_STR(log,
            "log error metadata.annotations is not an object\n"
            "log error index secrets of Widget demo/w1: the index function of indexes[2] failed\n");
}
#else
static void a_manifest_with_indexes_traps_in_a_world_without_the_export(void) {
  guest_manifest = indexing;
  char log[1024];
  CHECK(traps(load_manifest, log, sizeof log));
  CHECK_STR(log,
            "log error the manifest declares 2 computed indexes, but this component does not "
            "export reconciler:api/indexes: build it for the world `indexing-controller` (a "
            "`wit-world` file beside the guest's .c files holding that name)\n");
}
#endif

// ---------------------------------------------------------------------------------------------

static const test_t tests[] = {
    TEST(conditions_set_adds_a_missing_type),
    TEST(conditions_set_keeps_transition_time_while_status_is_unchanged),
    TEST(conditions_set_moves_transition_time_when_status_flips),
    TEST(conditions_set_reports_no_change_for_an_identical_condition),
    TEST(conditions_observed_generation_always_follows),
    TEST(conditions_are_read_from_an_object_and_written_as_json),
    TEST(times_are_rfc3339_in_whole_seconds),
    TEST(host_errors_become_transient_or_permanent_by_kind),
    TEST(the_last_error_keeps_its_text_until_the_call_returns),
    TEST(manifest_defaults_are_all_namespaces_no_secondaries_and_host_concurrency),
    TEST(manifest_carries_every_field_that_was_set),
    TEST(the_request_object_is_parsed_lazily_and_once),
    TEST(the_request_carries_ref_key_attempt_and_text),
    TEST(results_become_the_wit_result),
    TEST(an_object_that_is_not_json_traps_after_logging_why),
    TEST(cluster_writes_and_events_reach_the_host_as_written),
    TEST(a_failed_write_is_an_error_with_the_hosts_kind_and_text),
    TEST(returned_objects_are_parsed_only_when_asked_for),
    TEST(apply_with_sends_the_fields_and_the_force_asked_for),
    TEST(the_lister_reads_one_object_or_a_list_as_json),
    TEST(the_queue_takes_keys_with_and_without_delay),
    TEST(log_lines_are_formatted_at_their_level),
    TEST(json_reads_objects_arrays_and_scalars),
    TEST(json_decodes_escapes_and_unicode),
    TEST(json_parse_keeps_no_reference_to_the_callers_text),
    TEST(json_refuses_what_is_not_json_and_says_where),
    TEST(json_serializes_values_and_quotes_strings),
    TEST(format_covers_what_messages_use),
    TEST(arena_memory_is_aligned_and_survives_large_requests),
#ifdef EXPORTS_RECONCILER_API_WATCHES_WATCH_MAPPING_OWNER
    TEST(a_manifest_with_watches_loads_where_the_component_exports_them),
    TEST(watches_are_the_contracts_records_with_unset_entries_skipped),
    TEST(an_incomplete_watch_traps_naming_what_it_lacks),
    TEST(map_calls_the_functions_of_the_kind_and_gives_each_key_once),
    TEST(map_of_a_kind_without_a_function_warns_and_gives_no_keys),
    TEST(a_failed_map_traps_naming_the_object_after_the_guests_reason),
#else
    TEST(a_manifest_with_watches_traps_in_a_world_without_the_export),
#endif
#ifdef EXPORTS_RECONCILER_API_INDEXES_LOOKUP_NAME
    TEST(a_manifest_with_indexes_loads_where_the_component_exports_them),
    TEST(indexes_are_the_contracts_records_with_unset_entries_skipped),
    TEST(index_calls_the_function_of_the_index_named_and_gives_each_value_once),
    TEST(index_of_a_name_no_index_declares_warns_and_gives_no_values),
    TEST(an_incomplete_index_traps_naming_what_it_lacks),
    TEST(a_failed_index_traps_naming_the_primary_after_the_guests_reason),
#else
    TEST(a_manifest_with_indexes_traps_in_a_world_without_the_export),
#endif
};

const char *current;
int failures;

static size_t run_tests(const test_t *list, size_t count) {
  for (size_t i = 0; i < count; i++) {
    current = list[i].name;
    int before = failures;
    list[i].run();
    rg_arena_free();  // what the export wrappers do when the guest returns
    rg_fake_reset();
    printf("%s %s\n", failures == before ? "ok  " : "FAIL", current);
  }
  return count;
}

int main(void) {
  size_t count = run_tests(tests, sizeof tests / sizeof *tests);
  count += run_tests(fake_host_tests, fake_host_test_count);
  printf("%zu tests, %d failed checks\n", count, failures);
  return failures == 0 ? 0 : 1;
}
