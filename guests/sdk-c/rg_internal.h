// What the SDK's files share and a guest does not call: the arena's end, the text sink behind
// every formatter and serialiser, the last error's setter, and the way out on a broken contract.
#ifndef RECONCILER_INTERNAL_H
#define RECONCILER_INTERNAL_H

#include "reconciler.h"

// Makes `ptr` (malloc'd) the arena's, freed with it: how a buffer the host returned lives as long
// as the tree parsed from it.
void rg_arena_adopt(void *ptr);

// Frees everything rg_alloc handed out (and forgets the last error, whose text was there); the
// export wrappers call it when the guest returns.
void rg_arena_free(void);

// Where text goes: `buf` holds `cap` bytes; `len` counts every byte written, also those that did
// not fit, so one pass with cap 0 measures and a second one writes (rg_render).
typedef struct rg_sink {
  char *buf;
  size_t cap;
  size_t len;
} rg_sink_t;

void rg_sink_put(rg_sink_t *sink, const char *text, size_t len);
void rg_sink_puts(rg_sink_t *sink, const char *text);
void rg_sink_vformat(rg_sink_t *sink, const char *fmt, va_list args);
void rg_sink_format(rg_sink_t *sink, const char *fmt, ...) RG_PRINTF(2, 3);
// `text` as a JSON string literal.
void rg_sink_quote(rg_sink_t *sink, const char *text, size_t len);

// What `render` writes, as a NUL-terminated string in the arena (it runs twice when the text is
// long: to measure, then to write).
const char *rg_render(void (*render)(rg_sink_t *sink, const void *arg), const void *arg);

// Parses text that outlives the tree (the tree points into it); rg_json_parse parses a copy.
const rg_json_t *rg_json_parse_in_place(const char *text, size_t len);

// A JSON array of `len` values that are in no container yet: how the lister's list becomes
// one value.
const rg_json_t *rg_json_array_of(const rg_json_t **items, size_t len);

// A map function's answer: keys in the arena, each once.
struct rg_keys {
  rg_key_t *items;
  size_t len;
  size_t cap;
};

// An index function's answer: values in the arena, each once.
struct rg_values {
  const char **items;
  size_t len;
  size_t cap;
};

// Makes (kind, text) the last error; returns kind.
rg_err_t rg_fail(rg_err_t kind, const char *text, size_t len);
// Back to "" (the arena that held the text is gone).
void rg_last_error_clear(void);

// `seconds` since the Unix epoch as RFC 3339 (`2026-01-02T03:04:05Z`) into out.
void rg_rfc3339(int64_t seconds, char out[21]);

// A broken contract or no memory left: logs `message` at error level and traps.
_Noreturn void rg_fatal(const char *message);

#endif
