// Label selectors in the Kubernetes string syntax (`a=b,c!=d,e in (x,y),f notin (z),g,!h`), for
// the fake host's lister.list: a port of the host's parser (host/src/cluster/selector.rs, after
// apimachinery's labels.Parse) with its grammar, key and value rules and error texts, and the
// text checks the host makes first (host/src/cluster/validation.rs, selector_text), so that a selector
// the fake takes, the host takes. Written here because the fake is plain C beside the SDK, which
// has no selector of its own (a guest only passes them on).
#define _POSIX_C_SOURCE 200809L  // strndup

#include "rg_fake_selector.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SELECTOR_BYTES 4096  // the host's (validation.rs)

typedef enum op { EQUAL, NOT_EQUAL, IN, NOT_IN, EXISTS, DOES_NOT_EXIST } op_t;

typedef struct requirement {
  op_t op;
  char *key;
  char **values;  // EQUAL and NOT_EQUAL: one; IN and NOT_IN: the set
  size_t len;
} requirement_t;

struct rg_fake_selector {
  requirement_t *items;
  size_t len;
};

// ---------------------------------------------------------------------------------------------
// Text

// printf into a new malloc'd string.
static char *print(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *print(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  int len = vsnprintf(NULL, 0, fmt, args);
  va_end(args);
  char *out = malloc((size_t)len + 1);
  if (out == NULL) abort();
  va_start(args, fmt);
  vsnprintf(out, (size_t)len + 1, fmt, args);
  va_end(args);
  return out;
}

// Appends one character as Rust's escape_debug writes it (the host's texts are Rust's).
static void put_debug(FILE *out, unsigned cp, const char *raw, size_t raw_len, bool quoted) {
  switch (cp) {
    case '\t': fputs("\\t", out); return;
    case '\r': fputs("\\r", out); return;
    case '\n': fputs("\\n", out); return;
    case '\0': fputs("\\0", out); return;
    case '\\': fputs("\\\\", out); return;
    case '"':
      fputs(quoted ? "\\\"" : "\"", out);
      return;
  }
  if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) fprintf(out, "\\u{%x}", cp);
  else fwrite(raw, 1, raw_len, out);
}

// The code point at p (UTF-8; a stray byte counts as itself) and its length.
static unsigned code_point(const char *p, size_t *len) {
  const unsigned char *u = (const unsigned char *)p;
  if (u[0] >= 0xc2 && u[0] < 0xe0 && (u[1] & 0xc0) == 0x80) {
    *len = 2;
    return ((u[0] & 0x1fu) << 6) | (u[1] & 0x3fu);
  }
  *len = 1;
  return u[0];
}

// `len` bytes of `text` as Rust's `{:?}` shows a string: quoted, escaped (malloc'd).
static char *debug_quoted(const char *text, size_t len) {
  char *out = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&out, &size);
  if (f == NULL) abort();
  fputc('"', f);
  for (size_t i = 0, n; i < len; i += n) {
    unsigned cp = code_point(text + i, &n);
    put_debug(f, cp, text + i, n, true);
  }
  fputc('"', f);
  fclose(f);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Lexing

typedef enum tok {
  IDENT,
  BANG,
  NOT_EQUALS,
  EQUALS,
  DOUBLE_EQUALS,
  GREATER,
  LESS,
  OPEN,
  CLOSE,
  COMMA,
  END,
} tok_t;

typedef struct token {
  tok_t kind;
  size_t at, len;  // IDENT: its span
} token_t;

static bool is_special(char c) { return c != '\0' && strchr("=!(),><", c) != NULL; }

// Rust's is_ascii_whitespace.
static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f';
}

static token_t *lex(const char *input, size_t *count) {
  size_t n = strlen(input), len = 0;
  token_t *tokens = malloc((n + 1) * sizeof *tokens);  // at most one per byte, and END
  if (tokens == NULL) abort();
  for (size_t i = 0; i < n;) {
    char c = input[i];
    if (is_space(c)) {
      i++;
      continue;
    }
    if (is_special(c)) {
      tok_t kind = c == '!' ? BANG : c == '=' ? EQUALS : c == '>' ? GREATER : c == '<' ? LESS
                 : c == '(' ? OPEN : c == ')' ? CLOSE : COMMA;
      if (c == '!' && input[i + 1] == '=') kind = NOT_EQUALS;
      if (c == '=' && input[i + 1] == '=') kind = DOUBLE_EQUALS;
      tokens[len++] = (token_t){kind, i, 0};
      i += kind == NOT_EQUALS || kind == DOUBLE_EQUALS ? 2 : 1;
      continue;
    }
    size_t start = i;
    while (i < n && !is_space(input[i]) && !is_special(input[i])) i++;
    tokens[len++] = (token_t){IDENT, start, i - start};
  }
  tokens[len++] = (token_t){END, n, 0};
  *count = len;
  return tokens;
}

// ---------------------------------------------------------------------------------------------
// Parsing

typedef struct parser {
  const char *input;
  token_t *tokens;
  size_t count, next;
  char *error;  // set once
} parser_t;

static token_t peek(const parser_t *ps) {
  return ps->tokens[ps->next < ps->count ? ps->next : ps->count - 1];
}

static token_t take(parser_t *ps) {
  token_t t = peek(ps);
  if (ps->next < ps->count) ps->next++;
  return t;
}

static char *describe(const parser_t *ps, token_t t) {
  switch (t.kind) {
    case IDENT: return debug_quoted(ps->input + t.at, t.len);
    case BANG: return print("'!'");
    case NOT_EQUALS: return print("'!='");
    case EQUALS: return print("'='");
    case DOUBLE_EQUALS: return print("'=='");
    case GREATER: return print("'>'");
    case LESS: return print("'<'");
    case OPEN: return print("'('");
    case CLOSE: return print("')'");
    case COMMA: return print("','");
    case END: break;
  }
  return print("the end of the selector");
}

// Records the error at byte `at` (its reason malloc'd, taken); returns false.
static bool fail(parser_t *ps, size_t at, char *reason) {
  if (ps->error == NULL) {
    char *shown = debug_quoted(ps->input, strlen(ps->input));
    ps->error =
        print("label-selector: invalid label selector %s at byte %zu: %s", shown, at, reason);
    free(shown);
  }
  free(reason);
  return false;
}

// Fails with "... found <the token>"; `fmt` has one %s for it.
static bool fail_at(parser_t *ps, token_t t, const char *fmt) {
  char *found = describe(ps, t);
  char *reason = print(fmt, found);
  free(found);
  return fail(ps, t.at, reason);
}

static bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static bool is_label_name(const char *s, size_t len) {
  if (len == 0 || len > 63 || !is_alnum(s[0]) || !is_alnum(s[len - 1])) return false;
  for (size_t i = 0; i < len; i++) {
    if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.') return false;
  }
  return true;
}

static bool is_dns_label(const char *s, size_t len) {
  if (len == 0 || len > 63 || s[0] == '-' || s[len - 1] == '-') return false;
  for (size_t i = 0; i < len; i++) {
    bool ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-';
    if (!ok) return false;
  }
  return true;
}

static bool valid_key(parser_t *ps, token_t t) {
  const char *key = ps->input + t.at, *slash = memchr(key, '/', t.len);
  const char *name = slash != NULL ? slash + 1 : key;
  size_t name_len = t.len - (size_t)(name - key);
  char *shown = debug_quoted(key, t.len);
  char *reason = NULL;
  if (slash != NULL) {
    size_t prefix_len = (size_t)(slash - key);
    bool ok = prefix_len > 0 && prefix_len <= 253;
    for (const char *label = key; ok && label <= slash;) {
      const char *dot = memchr(label, '.', (size_t)(slash - label));
      const char *end = dot != NULL ? dot : slash;
      ok = is_dns_label(label, (size_t)(end - label));
      label = end + 1;
    }
    if (!ok) {
      char *prefix = debug_quoted(key, prefix_len);
      reason = print("label key %s has an invalid prefix %s: it must be a lowercase DNS subdomain "
                     "(e.g. example.com) of at most 253 characters",
                     shown, prefix);
      free(prefix);
    }
  }
  if (reason == NULL && name_len == 0) reason = print("label key %s has an empty name", shown);
  if (reason == NULL && !is_label_name(name, name_len)) {
    reason = print("label key %s is invalid: the name must be at most 63 characters of "
                   "[A-Za-z0-9-_.], starting and ending with a letter or digit",
                   shown);
  }
  free(shown);
  return reason == NULL || fail(ps, t.at, reason);
}

static bool valid_value(parser_t *ps, token_t t) {
  if (t.len == 0 || is_label_name(ps->input + t.at, t.len)) return true;
  char *shown = debug_quoted(ps->input + t.at, t.len);
  char *reason = print("label value %s is invalid: it must be at most 63 characters of "
                       "[A-Za-z0-9-_.], starting and ending with a letter or digit",
                       shown);
  free(shown);
  return fail(ps, t.at, reason);
}

static void add_value(requirement_t *r, const char *text, size_t len) {
  char **values = realloc(r->values, (r->len + 1) * sizeof *values);
  if (values == NULL) abort();
  r->values = values;
  r->values[r->len] = strndup(text, len);
  if (r->values[r->len++] == NULL) abort();
}

// The value after `=`, `==` or `!=`; empty when the requirement ends there (`a=`).
static bool exact_value(parser_t *ps, requirement_t *r) {
  token_t t = peek(ps);
  if (t.kind == COMMA || t.kind == END) {
    add_value(r, "", 0);
    return true;
  }
  if (t.kind != IDENT) return fail_at(ps, t, "expected a label value, found %s");
  take(ps);
  if (!valid_value(ps, t)) return false;
  add_value(r, ps->input + t.at, t.len);
  return true;
}

// `( v1, v2, ... )`. As in apimachinery, an empty slot (`()`, `(a,)`) is the empty value.
static bool value_set(parser_t *ps, requirement_t *r) {
  token_t open = take(ps);
  if (open.kind != OPEN) return fail_at(ps, open, "expected '(' after in/notin, found %s");
  bool expect_value = true;
  for (;;) {
    token_t t = take(ps);
    if (t.kind == IDENT && expect_value) {
      if (!valid_value(ps, t)) return false;
      add_value(r, ps->input + t.at, t.len);
      expect_value = false;
    } else if (t.kind == COMMA || t.kind == CLOSE) {
      if (expect_value) add_value(r, "", 0);
      if (t.kind == CLOSE) return true;
      expect_value = true;
    } else if (t.kind == END) {
      return fail(ps, t.at, print("unclosed value list: expected ')'"));
    } else {
      return fail_at(ps, t, "expected a label value, ',' or ')' in the value list, found %s");
    }
  }
}

static bool requirement(parser_t *ps, requirement_t *r) {
  token_t t = take(ps);
  bool negated = t.kind == BANG;
  if (negated) t = take(ps);
  if (t.kind != IDENT) return fail_at(ps, t, "expected a label key, found %s");
  if (!valid_key(ps, t)) return false;
  r->key = strndup(ps->input + t.at, t.len);
  if (r->key == NULL) abort();
  if (negated) {
    r->op = DOES_NOT_EXIST;
    return true;
  }
  token_t op = peek(ps);
  const char *word = ps->input + op.at;
  switch (op.kind) {
    case COMMA:
    case END:
      r->op = EXISTS;
      return true;
    case EQUALS:
    case DOUBLE_EQUALS:
    case NOT_EQUALS:
      take(ps);
      r->op = op.kind == NOT_EQUALS ? NOT_EQUAL : EQUAL;
      return exact_value(ps, r);
    case IDENT:
      if ((op.len == 2 && strncmp(word, "in", 2) == 0) ||
          (op.len == 5 && strncmp(word, "notin", 5) == 0)) {
        take(ps);
        r->op = op.len == 2 ? IN : NOT_IN;
        return value_set(ps, r);
      }
      break;
    case GREATER:
    case LESS:
      return fail_at(ps, op,
                     "operator %s is not supported here (use =, ==, !=, in, notin, key or !key)");
    default:
      break;
  }
  char *key = debug_quoted(ps->input + t.at, t.len), *found = describe(ps, op);
  char *reason = print(
      "expected an operator (=, ==, !=, in, notin), ',' or the end after key %s, found %s", key,
      found);
  free(key);
  free(found);
  return fail(ps, op.at, reason);
}

// ---------------------------------------------------------------------------------------------
// The API

// What the host checks of the text before parsing it (validation.rs, selector_text).
static char *refused_text(const char *text) {
  size_t len = strlen(text);
  if (len > MAX_SELECTOR_BYTES) {
    return print("label-selector: is longer than %d bytes", MAX_SELECTOR_BYTES);
  }
  for (size_t i = 0, n; i < len; i += n) {
    unsigned cp = code_point(text + i, &n);
    if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) {
      char *out = NULL;
      size_t size = 0;
      FILE *f = open_memstream(&out, &size);
      if (f == NULL) abort();
      fputs("label-selector: may not contain `", f);
      put_debug(f, cp, text + i, n, false);
      fputc('`', f);
      fclose(f);
      return out;
    }
  }
  return NULL;
}

rg_fake_selector_t *rg_fake_selector_parse(const char *text, char **error) {
  *error = refused_text(text);
  if (*error != NULL) return NULL;
  rg_fake_selector_t *s = calloc(1, sizeof *s);
  if (s == NULL) abort();
  parser_t ps = {.input = text};
  ps.tokens = lex(text, &ps.count);
  bool ok = true;
  if (peek(&ps).kind != END) {
    for (;;) {
      requirement_t *items = realloc(s->items, (s->len + 1) * sizeof *items);
      if (items == NULL) abort();
      s->items = items;
      s->items[s->len] = (requirement_t){0};
      ok = requirement(&ps, &s->items[s->len++]);
      if (!ok) break;
      token_t t = take(&ps);
      if (t.kind == END) break;
      if (t.kind != COMMA) {
        ok = fail_at(&ps, t, "expected ',' or the end of the selector, found %s");
        break;
      }
    }
  }
  free(ps.tokens);
  if (!ok) {
    rg_fake_selector_free(s);
    *error = ps.error;
    return NULL;
  }
  return s;
}

// The value of label `key`, or NULL.
static const char *label(const char *key, char *const *keys, char *const *values, size_t len) {
  for (size_t i = 0; i < len; i++) {
    if (strcmp(keys[i], key) == 0) return values[i];
  }
  return NULL;
}

static bool among(const requirement_t *r, const char *value) {
  for (size_t i = 0; i < r->len; i++) {
    if (strcmp(r->values[i], value) == 0) return true;
  }
  return false;
}

bool rg_fake_selector_matches(const rg_fake_selector_t *selector, char *const *keys,
                              char *const *values, size_t len) {
  for (size_t i = 0; selector != NULL && i < selector->len; i++) {
    const requirement_t *r = &selector->items[i];
    const char *value = label(r->key, keys, values, len);
    bool match = false;
    switch (r->op) {
      case EQUAL: match = value != NULL && strcmp(value, r->values[0]) == 0; break;
      // As apimachinery: `!=` and `notin` match an object without the label.
      case NOT_EQUAL: match = value == NULL || strcmp(value, r->values[0]) != 0; break;
      case IN: match = value != NULL && among(r, value); break;
      case NOT_IN: match = value == NULL || !among(r, value); break;
      case EXISTS: match = value != NULL; break;
      case DOES_NOT_EXIST: match = value == NULL; break;
    }
    if (!match) return false;
  }
  return true;
}

void rg_fake_selector_free(rg_fake_selector_t *selector) {
  if (selector == NULL) return;
  for (size_t i = 0; i < selector->len; i++) {
    free(selector->items[i].key);
    for (size_t v = 0; v < selector->items[i].len; v++) free(selector->items[i].values[v]);
    free(selector->items[i].values);
  }
  free(selector->items);
  free(selector);
}
