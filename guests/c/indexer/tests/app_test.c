// Native unit tests of the indexer (../app.c) against the C SDK's fake host
// (guests/sdk-c/testing): its index function through the `index` export, and a reconcile that
// reads ConfigMaps and writes the status, as the host would run them. guests/sdk-c/test.sh builds
// and runs this with ../app.c for the world in ../wit-world.
#include <stdio.h>
#include <string.h>

#include "reconciler_testing.h"

static int failures;

static void expect(const char *what, const char *actual, const char *expected) {
  if (strcmp(actual, expected) == 0) return;
  failures++;
  fprintf(stderr, "%s\n  is:  %s\n  not: %s\n", what, actual, expected);
}

#define WIDGET(annotations)                                                                       \
  "{\"apiVersion\":\"test.reconciler.dev/v1\",\"kind\":\"Widget\",\"metadata\":{\"namespace\":" \
  "\"demo\",\"name\":\"w1\"" annotations "}}"
#define LISTING(list) WIDGET(",\"annotations\":{\"test.reconciler.dev/configmaps\":\"" list "\"}")
#define CONFIG_MAP(namespace, name, more)                                                   \
  "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"namespace\":\"" namespace \
  "\",\"name\":\"" name "\"}" more "}"

static void the_index_holds_each_name_the_annotation_lists_once(void) {
  expect("a list", rg_fake_index("configmaps", LISTING("settings, flags")), "settings\nflags\n");
  expect("spaces, empty entries and repeats", rg_fake_index("configmaps", LISTING(" a ,, b,a, ")),
         "a\nb\n");
  expect("no annotation", rg_fake_index("configmaps", WIDGET("")), "");
  expect("no host call", rg_fake_calls(), "");
}

static void a_reconcile_reads_the_listed_config_maps_and_writes_what_it_found(void) {
  rg_fake_load("[" LISTING("settings, gone, flags") ","
               CONFIG_MAP("demo", "settings", ",\"data\":{\"value\":\"debug\"}") ","
               CONFIG_MAP("demo", "flags", "") ","
               CONFIG_MAP("other", "gone", "") "]");  // another namespace's
  expect("the result", rg_fake_reconcile((rg_key_t){"demo", "w1"}), "ok");
  expect("the calls", rg_fake_calls(),
         "lister.get v1/ConfigMap demo/settings\n"
         "lister.get v1/ConfigMap demo/gone\n"
         "lister.get v1/ConfigMap demo/flags\n"
         "cluster.patch-status test.reconciler.dev/v1/Widget demo/w1 "
         "{\"status\":{\"configMaps\":[\"settings=debug\",\"flags=\"],\"missing\":[\"gone\"]}}\n");
  rg_fake_reset();
  expect("a Widget that is gone", rg_fake_reconcile((rg_key_t){"demo", "w1"}), "ok");
  expect("writes nothing", rg_fake_writes(), "");
}

int main(void) {
  the_index_holds_each_name_the_annotation_lists_once();
  rg_fake_reset();
  a_reconcile_reads_the_listed_config_maps_and_writes_what_it_found();
  rg_fake_reset();
  printf("indexer: %s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
