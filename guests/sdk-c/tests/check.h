// What the test files share: the checks, which count a failure and say where, and the tables
// test.c's main runs.
#ifndef CHECK_H
#define CHECK_H

#include <stdio.h>
#include <string.h>

#include "reconciler.h"

// The test running now, and the failed checks so far (test.c).
extern const char *current;
extern int failures;

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      failures++;                                                                     \
      fprintf(stderr, "%s:%d: %s: CHECK(%s) failed\n", __FILE__, __LINE__, current, #cond); \
    }                                                                                 \
  } while (0)

#define CHECK_STR(actual, expected)                                                         \
  do {                                                                                      \
    const char *a_ = (actual), *e_ = (expected);                                            \
    if (a_ == NULL || e_ == NULL ? a_ != e_ : strcmp(a_, e_) != 0) {                        \
      failures++;                                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n  is:  %s\n  not: %s\n", __FILE__, __LINE__, current, \
              #actual, a_ ? a_ : "(NULL)", e_ ? e_ : "(NULL)");                             \
    }                                                                                       \
  } while (0)

typedef struct test {
  const char *name;
  void (*run)(void);
} test_t;

#define TEST(name) {#name, name}

// The guest's `manifest` and `reconcile` (test.c defines them) call these, set by each test.
extern rg_manifest_t (*guest_manifest)(void);
extern rg_result_t (*guest_reconcile)(rg_request_t *req);

// fake_host_test.c's.
extern const test_t fake_host_tests[];
extern const size_t fake_host_test_count;

#endif
