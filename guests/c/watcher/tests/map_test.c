// A native unit test of the watcher's map function (../app.c, widgets_named_by) against the C
// SDK's fake host (guests/sdk-c/testing), through the `map` export as the host calls it.
// guests/sdk-c/test.sh builds and runs this with ../app.c for the world in ../wit-world.
#include <stdio.h>
#include <string.h>

#include "reconciler_testing.h"

static int failures;

static void expect(const char *what, const char *actual, const char *expected) {
  if (strcmp(actual, expected) == 0) return;
  failures++;
  fprintf(stderr, "%s\n  is:  %s\n  not: %s\n", what, actual, expected);
}

#define CONFIG_MAP(annotations)                                                          \
  "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"namespace\":\"demo\"," \
  "\"name\":\"settings\"" annotations "}}"
#define NAMING(list) CONFIG_MAP(",\"annotations\":{\"test.reconciler.dev/widgets\":\"" list "\"}")

int main(void) {
  const rg_gvk_t config_map = {"", "v1", "ConfigMap"};
  expect("the Widgets the annotation names, in its namespace",
         rg_fake_map(config_map, NAMING("a,b")), "demo/a\ndemo/b\n");
  expect("trimmed, empty entries skipped, each once",
         rg_fake_map(config_map, NAMING(" a ,, b ,a")), "demo/a\ndemo/b\n");
  expect("no annotation: no keys", rg_fake_map(config_map, CONFIG_MAP("")), "");
  expect("another kind: no keys", rg_fake_map((rg_gvk_t){"", "v1", "Secret"}, NAMING("a")), "");
  expect("map reads nothing, writes nothing; the other kind is logged", rg_fake_calls(),
         "log warn map was called for Secret v1, which no RG_MAP_FUNCTION watch declares: no "
         "keys\n");
  rg_fake_reset();
  printf("watcher: %s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
