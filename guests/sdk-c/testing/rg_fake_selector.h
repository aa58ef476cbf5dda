// Label selectors for the fake host's lister.list (rg_fake_selector.c); not for tests to call.
#ifndef RG_FAKE_SELECTOR_H
#define RG_FAKE_SELECTOR_H

#include <stdbool.h>
#include <stddef.h>

typedef struct rg_fake_selector rg_fake_selector_t;

// Parses `text` as the host's lister does (host/src/cluster/selector.rs, after apimachinery's
// labels.Parse); the empty or blank text selects everything. NULL when it is not a selector, with
// *error the host's text, `label-selector: invalid label selector "a=b," at byte 4: ...`
// (malloc'd, the caller's to free).
rg_fake_selector_t *rg_fake_selector_parse(const char *text, char **error);

// Whether labels (`len` pairs of keys[i]=values[i]) match every requirement of `selector`.
bool rg_fake_selector_matches(const rg_fake_selector_t *selector, char *const *keys,
                              char *const *values, size_t len);

void rg_fake_selector_free(rg_fake_selector_t *selector);

#endif
