// The fake host's own tests (../testing/rg_fake_host.c, rg_fake_selector.c): what it answers is
// what a guest's tests rely on, so its model is pinned here, through the SDK as a guest calls it.
// Selectors against the host's own cases (host/src/cluster/selector.rs) and texts.
#include <stdlib.h>

#include "check.h"
#include "reconciler_testing.h"
#include "rg_internal.h"

#define CONFIG_MAP(namespace, name, labels)                                             \
  "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"namespace\":\"" namespace \
  "\",\"name\":\"" name "\",\"labels\":{" labels "}}}"

static const rg_gvk_t config_maps = {"", "v1", "ConfigMap"};

// The names of the ConfigMaps a list finds, "ns/name ns/name"; or the error's kind and text.
static const char *listed(const char *namespace, const char *selector) {
  const rg_json_t *list = NULL;
  rg_err_t err = rg_lister_list(config_maps, namespace, selector, &list);
  if (err != RG_OK) return rg_format("%s: %s", rg_err_name(err), rg_last_error());
  const char *names = "";
  for (const rg_json_t *item = rg_json_first(list); item != NULL; item = rg_json_next(item)) {
    rg_ref_t ref;
    rg_ref_from_json(item, &ref);
    names = rg_format("%s%s%s%s%s", names, *names ? " " : "", ref.namespace ? ref.namespace : "",
                      ref.namespace ? "/" : "", ref.name);
  }
  return names;
}

static void list_takes_a_kind_in_a_namespace_or_all_sorted_by_namespace_then_name(void) {
  rg_fake_load("[" CONFIG_MAP("b", "z", "") "," CONFIG_MAP("a", "y", "") ","
               CONFIG_MAP("b", "x", "") ",{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"namespace\":\"a\","
               "\"name\":\"s\"}},"
               "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\"}}]");
  CHECK_STR(listed(NULL, NULL), "c a/y b/x b/z");  // the cluster-scoped one first, as the host's
  CHECK_STR(listed("b", NULL), "b/x b/z");
  CHECK_STR(listed("none", NULL), "");
  const rg_json_t *list = NULL;
  CHECK(rg_lister_list((rg_gvk_t){"", "v2", "ConfigMap"}, NULL, NULL, &list) == RG_OK);
  CHECK(rg_json_len(list) == 0);  // another version is another kind
}

static void selectors_match_as_the_hosts_with_every_operator(void) {
  // The host's full_example_and_matching, one object per case.
  rg_fake_load("["
      CONFIG_MAP("n", "good", "\"a\":\"b\",\"c\":\"x\",\"e\":\"y\",\"f\":\"q\",\"g\":\"\"") ","
      CONFIG_MAP("n", "a-differs", "\"a\":\"x\",\"e\":\"y\",\"g\":\"\"") ","
      CONFIG_MAP("n", "c-is-d", "\"a\":\"b\",\"c\":\"d\",\"e\":\"y\",\"g\":\"\"") ","
      CONFIG_MAP("n", "e-not-in", "\"a\":\"b\",\"e\":\"q\",\"g\":\"\"") ","
      CONFIG_MAP("n", "f-in", "\"a\":\"b\",\"e\":\"x\",\"f\":\"z\",\"g\":\"\"") ","
      CONFIG_MAP("n", "g-missing", "\"a\":\"b\",\"e\":\"x\"") ","
      CONFIG_MAP("n", "h-present", "\"a\":\"b\",\"e\":\"x\",\"g\":\"\",\"h\":\"1\"") "]");
  CHECK_STR(listed(NULL, "a=b,c!=d,e in (x,y),f notin (z),g,!h"), "n/good");
  // One operator at a time; `!=` and `notin` take an object without the label.
  CHECK_STR(listed(NULL, "a==x"), "n/a-differs");
  CHECK_STR(listed(NULL, "c!=d"), "n/a-differs n/e-not-in n/f-in n/g-missing n/good n/h-present");
  CHECK_STR(listed(NULL, "f notin (z)"),
            "n/a-differs n/c-is-d n/e-not-in n/g-missing n/good n/h-present");
  CHECK_STR(listed(NULL, "e in (q, x)"), "n/e-not-in n/f-in n/g-missing n/h-present");
  CHECK_STR(listed(NULL, "h"), "n/h-present");
  CHECK_STR(listed(NULL, "!g"), "n/g-missing");
  CHECK_STR(listed(NULL, "g="), "n/a-differs n/c-is-d n/e-not-in n/f-in n/good n/h-present");
  CHECK_STR(listed(NULL, "g in ()"), "n/a-differs n/c-is-d n/e-not-in n/f-in n/good n/h-present");
  CHECK_STR(listed(NULL, "   "), listed(NULL, NULL));  // blank: every object
  CHECK_STR(listed(NULL, "  !h ,  a = b , e notin ( q , x ) "), "n/c-is-d n/good");
}

static void a_bad_selector_is_invalid_with_the_hosts_text(void) {
  static const struct {
    const char *selector, *text;
  } cases[] = {
      {"a=b,", "invalid label selector \"a=b,\" at byte 4: expected a label key, found the end "
               "of the selector"},
      {"a in x", "invalid label selector \"a in x\" at byte 5: expected '(' after in/notin, "
                 "found \"x\""},
      {"a in (x,y", "invalid label selector \"a in (x,y\" at byte 9: unclosed value list: "
                    "expected ')'"},
      {"a>1", "invalid label selector \"a>1\" at byte 1: operator '>' is not supported here (use "
              "=, ==, !=, in, notin, key or !key)"},
      {"a b", "invalid label selector \"a b\" at byte 2: expected an operator (=, ==, !=, in, "
              "notin), ',' or the end after key \"a\", found \"b\""},
      {"!a=b", "invalid label selector \"!a=b\" at byte 2: expected ',' or the end of the "
               "selector, found '='"},
      {"a=(b)", "invalid label selector \"a=(b)\" at byte 2: expected a label value, found '('"},
      {"a in (x y)", "invalid label selector \"a in (x y)\" at byte 8: expected a label value, "
                     "',' or ')' in the value list, found \"y\""},
      {"Example.com/a=b", "invalid label selector \"Example.com/a=b\" at byte 0: label key "
                          "\"Example.com/a\" has an invalid prefix \"Example.com\": it must be a "
                          "lowercase DNS subdomain (e.g. example.com) of at most 253 characters"},
      {"example.com/=b", "invalid label selector \"example.com/=b\" at byte 0: label key "
                         "\"example.com/\" has an empty name"},
      {"-a=b", "invalid label selector \"-a=b\" at byte 0: label key \"-a\" is invalid: the name "
               "must be at most 63 characters of [A-Za-z0-9-_.], starting and ending with a "
               "letter or digit"},
      {"a=b_", "invalid label selector \"a=b_\" at byte 2: label value \"b_\" is invalid: it must "
               "be at most 63 characters of [A-Za-z0-9-_.], starting and ending with a letter or "
               "digit"},
      {"a=\"b\"", "invalid label selector \"a=\\\"b\\\"\" at byte 2: label value \"\\\"b\\\"\" is "
                  "invalid: it must be at most 63 characters of [A-Za-z0-9-_.], starting and "
                  "ending with a letter or digit"},
      // The host's checks of the text come first: no control characters, tabs included.
      {"a=b\x01", "may not contain `\\u{1}`"},
      {"a=b,\tc", "may not contain `\\t`"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    CHECK_STR(listed(NULL, cases[i].selector),
              rg_format("invalid: label-selector: %s", cases[i].text));
  }
  char *long_selector = malloc(4098);
  memset(long_selector, 'a', 4097);
  long_selector[4097] = '\0';
  CHECK_STR(listed(NULL, long_selector), "invalid: label-selector: is longer than 4096 bytes");
  free(long_selector);
  CHECK_STR(listed(NULL, "in=notin,x_y.z-1=A.b_c-9"), "");  // valid, though nothing matches
}

static void get_names_an_object_by_kind_namespace_and_name(void) {
  rg_fake_load(CONFIG_MAP("demo", "a", "\"v\":\"1\""));
  rg_fake_load("{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"demo\"}}");
  const rg_json_t *found = NULL;
  CHECK(rg_lister_get(&(rg_ref_t){config_maps, "demo", "a"}, &found) == RG_OK && found != NULL);
  CHECK(rg_lister_get(&(rg_ref_t){config_maps, NULL, "a"}, &found) == RG_OK && found == NULL);
  CHECK(rg_lister_get(&(rg_ref_t){config_maps, "other", "a"}, &found) == RG_OK && found == NULL);
  rg_ref_t ns = {{"", "v1", "Namespace"}, NULL, "demo"};
  CHECK(rg_lister_get(&ns, &found) == RG_OK && found != NULL);
  CHECK_STR(rg_fake_get(&ns),
            "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"demo\"}}");
  // A later object of the same name replaces the earlier.
  rg_fake_load(CONFIG_MAP("demo", "a", "\"v\":\"2\""));
  CHECK_STR(rg_fake_get(&(rg_ref_t){config_maps, "demo", "a"}),
            CONFIG_MAP("demo", "a", "\"v\":\"2\""));
  CHECK_STR(listed(NULL, NULL), "demo/a");
  CHECK_STR(rg_fake_calls(),
            "lister.get v1/ConfigMap demo/a\n"
            "lister.get v1/ConfigMap a\n"
            "lister.get v1/ConfigMap other/a\n"
            "lister.get v1/Namespace demo\n"
            "lister.list v1/ConfigMap namespace=(all) selector=(all)\n");
}

#define WIDGET                                                                                    \
  "{\"apiVersion\":\"test.reconciler.dev/v1\",\"kind\":\"Widget\",\"metadata\":{\"namespace\":" \
  "\"demo\",\"name\":\"w1\"},\"spec\":{\"n\":1},\"status\":{\"phase\":\"Old\",\"keep\":true}}"

static const rg_ref_t widget = {{"test.reconciler.dev", "v1", "Widget"}, "demo", "w1"};

static void writes_change_the_objects_a_later_read_sees(void) {
  rg_fake_load(WIDGET);
  const rg_json_t *returned = NULL;
  // patch-status: the patch's status, merged (null removes); nothing else of it.
  CHECK(rg_cluster_patch_status(&widget,
                                "{\"status\":{\"phase\":\"Ready\",\"keep\":null,\"n\":{\"a\":1,"
                                "\"b\":null}},\"spec\":{\"n\":2}}",
                                &returned) == RG_OK);
  const char *patched =
      "{\"apiVersion\":\"test.reconciler.dev/v1\",\"kind\":\"Widget\",\"metadata\":{\"namespace\":"
      "\"demo\",\"name\":\"w1\"},\"spec\":{\"n\":1},\"status\":{\"phase\":\"Ready\","
      "\"n\":{\"a\":1}}}";
  CHECK_STR(rg_json_serialize(returned), patched);
  CHECK_STR(rg_fake_get(&widget), patched);

  // apply: merged into the loaded object, or added.
  CHECK(rg_cluster_apply("{\"apiVersion\":\"test.reconciler.dev/v1\",\"kind\":\"Widget\","
                         "\"metadata\":{\"namespace\":\"demo\",\"name\":\"w1\",\"labels\":{\"x\":"
                         "\"y\"}},\"spec\":{\"m\":null,\"o\":true}}",
                         &returned) == RG_OK);
  CHECK_STR(rg_json_serialize(rg_json_get(returned, "spec")), "{\"n\":1,\"o\":true}");
  CHECK_STR(rg_json_serialize(rg_json_path(returned, "metadata", "labels")), "{\"x\":\"y\"}");
  const char *copy = "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"namespace\":"
                     "\"t\",\"name\":\"copy\"},\"data\":{\"a\":\"1\",\"b\":null}}";
  CHECK(rg_cluster_apply_with(copy, (rg_apply_options_t){0}, &returned) == RG_OK);
  CHECK_STR(rg_fake_get(&(rg_ref_t){config_maps, "t", "copy"}),
            "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"namespace\":\"t\","
            "\"name\":\"copy\"},\"data\":{\"a\":\"1\"}}");
  CHECK_STR(listed("t", "x"), "");

  // delete: gone, and said so.
  bool existed = false;
  CHECK(rg_cluster_delete(&(rg_ref_t){config_maps, "t", "copy"}, &existed) == RG_OK && existed);
  CHECK(rg_cluster_delete(&(rg_ref_t){config_maps, "t", "copy"}, &existed) == RG_OK && !existed);
  CHECK(rg_fake_get(&(rg_ref_t){config_maps, "t", "copy"}) == NULL);

  // Recorded, in order, never sent.
  CHECK(rg_event_record(&widget, RG_EVENT_NORMAL, "Synced", "done") == RG_OK);
  CHECK(rg_queue_enqueue((rg_key_t){"demo", "w1"}) == RG_OK);
  rg_info("after the writes");
  CHECK_STR(rg_fake_writes(),
            "cluster.patch-status test.reconciler.dev/v1/Widget demo/w1 {\"status\":{\"phase\":"
            "\"Ready\",\"keep\":null,\"n\":{\"a\":1,\"b\":null}},\"spec\":{\"n\":2}}\n"
            "cluster.apply {\"apiVersion\":\"test.reconciler.dev/v1\",\"kind\":\"Widget\","
            "\"metadata\":{\"namespace\":\"demo\",\"name\":\"w1\",\"labels\":{\"x\":\"y\"}},"
            "\"spec\":{\"m\":null,\"o\":true}}\n"
            "cluster.apply-with force=false {\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\","
            "\"metadata\":{\"namespace\":\"t\",\"name\":\"copy\"},\"data\":{\"a\":\"1\","
            "\"b\":null}}\n"
            "cluster.delete v1/ConfigMap t/copy\n"
            "cluster.delete v1/ConfigMap t/copy\n"
            "cluster.record-event Normal Synced test.reconciler.dev/v1/Widget demo/w1: done\n"
            "queue.enqueue demo/w1 after=none\n");
  CHECK_STR(rg_fake_logs(), "log info after the writes\n");
}

static void a_write_the_fake_cannot_model_is_refused_as_the_host_would(void) {
  CHECK(rg_cluster_patch_status(&widget, "{\"status\":{}}", NULL) == RG_NOT_FOUND);
  CHECK_STR(rg_last_error(),
            "patch-status of test.reconciler.dev/v1/Widget demo/w1: not found (the fake host has "
            "no such object; load it with rg_fake_load)");
  rg_fake_load(WIDGET);
  CHECK(rg_cluster_patch_status(&widget, "{\"status\":", NULL) == RG_INVALID);
  CHECK_STR(rg_last_error(), "patch: not JSON: unexpected end at byte 10");
  CHECK(rg_cluster_apply("{\"kind\":\"ConfigMap\"}", NULL) == RG_INVALID);
  CHECK_STR(rg_last_error(), "object: an apply needs apiVersion, kind and metadata.name");
  CHECK_STR(rg_fake_get(&widget), WIDGET);
}

static void scripted_answers_are_taken_in_order_by_the_calls_they_name(void) {
  rg_fake_load(WIDGET);
  rg_fake_fail_next("cluster.apply", RG_CONFLICT, "applied by another");
  rg_fake_fail_next(NULL, RG_UNAVAILABLE, "any call");
  rg_fake_answer_next("lister.get", NULL);
  rg_fake_answer_next("cluster.patch-status", "{\"metadata\":{\"resourceVersion\":\"9\"}}");
  rg_info("logs take no script");
  const rg_json_t *found = NULL;
  CHECK(rg_lister_get(&widget, &found) == RG_UNAVAILABLE);  // the first that fits: any call
  CHECK_STR(rg_last_error(), "any call");
  CHECK(rg_lister_get(&widget, &found) == RG_OK && found == NULL);  // answered: none
  CHECK(rg_lister_get(&widget, &found) == RG_OK && found != NULL);  // the loaded one again
  CHECK(rg_cluster_apply(WIDGET, NULL) == RG_CONFLICT);
  CHECK(rg_cluster_patch_status(&widget, "{\"status\":{\"phase\":\"New\"}}", &found) == RG_OK);
  CHECK_STR(rg_json_serialize(found), "{\"metadata\":{\"resourceVersion\":\"9\"}}");
  CHECK_STR(rg_fake_get(&widget), WIDGET);  // scripted answers change nothing
}

static rg_manifest_t widgets(void) {
  return (rg_manifest_t){.name = "widgets", .primary = {"test.reconciler.dev", "v1", "Widget"}};
}

// Says what it was handed, and answers by the object's spec.answer.
static rg_result_t answers_by_spec(rg_request_t *req) {
  const rg_json_t *object = rg_request_object(req);
  rg_info("%s/%s object=%s deleting=%d attempt=%u", req->ref.namespace, req->ref.name,
          object != NULL ? "yes" : "no", req->deleting, req->attempt);
  const char *answer = rg_json_string(rg_json_path(object, "spec", "answer"));
  if (answer == NULL) return rg_await_change();
  if (strcmp(answer, "requeue") == 0) return rg_requeue_after_ms(1500);
  if (strcmp(answer, "transient") == 0) return rg_transient("backend %s is down", "db");
  return rg_permanent("spec.answer %s is not one", answer);
}

#define ANSWERING(name, answer, more)                                                        \
  "{\"apiVersion\":\"test.reconciler.dev/v1\",\"kind\":\"Widget\",\"metadata\":{\"namespace\":" \
  "\"demo\",\"name\":\"" name "\"" more "},\"spec\":{\"answer\":\"" answer "\"}}"

static void reconcile_hands_the_loaded_object_over_as_the_host_does(void) {
  guest_manifest = widgets;
  guest_reconcile = answers_by_spec;
  rg_fake_load("[" ANSWERING("r", "requeue", "") "," ANSWERING("t", "transient", "") ","
                   ANSWERING("p", "odd", "") ","
                   ANSWERING("d", "requeue", ",\"deletionTimestamp\":\"2026-01-02T03:04:05Z\"")
               "]");
  CHECK_STR(rg_fake_reconcile((rg_key_t){"demo", "gone"}), "ok");
  CHECK_STR(rg_fake_reconcile((rg_key_t){"demo", "r"}), "requeue after 1500 ms");
  CHECK_STR(rg_fake_reconcile((rg_key_t){"demo", "t"}), "transient: backend db is down");
  CHECK_STR(rg_fake_reconcile((rg_key_t){"demo", "p"}), "permanent: spec.answer odd is not one");
  CHECK_STR(rg_fake_reconcile((rg_key_t){"demo", "d"}), "requeue after 1500 ms");
  CHECK_STR(rg_fake_logs(),
            "log info demo/gone object=no deleting=0 attempt=0\n"
            "log info demo/r object=yes deleting=0 attempt=0\n"
            "log info demo/t object=yes deleting=0 attempt=0\n"
            "log info demo/p object=yes deleting=0 attempt=0\n"
            "log info demo/d object=yes deleting=1 attempt=0\n");
}

const test_t fake_host_tests[] = {
    TEST(list_takes_a_kind_in_a_namespace_or_all_sorted_by_namespace_then_name),
    TEST(selectors_match_as_the_hosts_with_every_operator),
    TEST(a_bad_selector_is_invalid_with_the_hosts_text),
    TEST(get_names_an_object_by_kind_namespace_and_name),
    TEST(writes_change_the_objects_a_later_read_sees),
    TEST(a_write_the_fake_cannot_model_is_refused_as_the_host_would),
    TEST(scripted_answers_are_taken_in_order_by_the_calls_they_name),
    TEST(reconcile_hands_the_loaded_object_over_as_the_host_does),
};
const size_t fake_host_test_count = sizeof fake_host_tests / sizeof *fake_host_tests;
