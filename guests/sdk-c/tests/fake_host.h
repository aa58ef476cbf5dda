// A fake of the generated import functions (wit-bindgen's `reconciler_api_*`), so that the SDK's
// binding layer runs natively: each call is recorded as one line of text, and answers with what
// the test scripted (or a plain success). What it returns is malloc'd the way the generated
// code's cabi_realloc does, so the leak checker sees whether the SDK frees it.
#ifndef FAKE_HOST_H
#define FAKE_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The calls made since fake_reset, e.g. "log info gone" or
// "cluster.patch-status test.reconciler.dev/v1/Widget demo/w1 {...}".
extern const char *fake_calls[64];
extern size_t fake_call_count;

// When >= 0, every log line is also written there (a test reads what a child process logged
// before it trapped).
extern int fake_log_fd;

// Forgets the calls and the scripted answer.
void fake_reset(void);

// The next import call (log excepted) fails with the WIT error case `tag` and `text`.
void fake_next_error(uint8_t tag, const char *text);

// The next import call succeeds with `text` (get: NULL for none; patch-status, apply and
// apply-with: the returned object).
void fake_next_text(const char *text);

// The next lister.list returns these objects.
void fake_next_list(const char *const *items, size_t len);

// The next cluster.delete returns `existed`.
void fake_next_bool(bool existed);

#endif
