// JSON: a parser into a tree in the arena, the NULL-tolerant accessors over it, and the writer.
// Written here rather than vendored (cJSON, yyjson, ...) because the SDK has to stay a handful
// of files a project copies, with its memory in the SDK's arena; it is one recursive-descent
// pass and a few hundred lines.
//
// Cost: parsing checks the whole text and builds one node per value, but leaves strings (and
// member names, and numbers) where they are in the text: one is decoded into the arena when it
// is first read, so a guest pays for the fields it looks at. A member name without escapes is
// compared in place. The tree therefore points into the text, which lives as long as the tree
// (the request's buffer; the host's returned buffers, which the arena adopts; a copy for
// rg_json_parse).
#include <stdint.h>
#include <string.h>

#include "rg_internal.h"

#define MAX_DEPTH 512

// A string, member name or number: the span of the source until first read, then decoded.
typedef struct text {
  const char *ptr;
  size_t len;
  enum { PLAIN, ESCAPED, DECODED } state;  // PLAIN: in the source, with nothing to decode
} text_t;

// Readers decode `text_t`s in place: the tree is const towards the guest, not inside the SDK.
struct rg_json {
  rg_json_type_t type;
  text_t key;            // the member's name inside an object; ptr NULL for an array's item
  struct rg_json *next;  // the next item or member of the enclosing container
  union {
    bool boolean;
    text_t scalar;  // strings and numbers
    struct {
      struct rg_json *first;
      size_t len;
    } children;
  } as;
};

// ---------------------------------------------------------------------------------------------
// Parsing

typedef struct parser {
  const char *start, *p, *end;
  int depth;
  bool failed;
} parser_t;

// Records the first failure as the last error; returns NULL for the callers' convenience.
static rg_json_t *fail(parser_t *ps, const char *what) {
  if (!ps->failed) {
    ps->failed = true;
    const char *text = rg_format("not JSON: %s at byte %zu", what, (size_t)(ps->p - ps->start));
    rg_fail(RG_INVALID, text, strlen(text));
  }
  return NULL;
}

static void skip_ws(parser_t *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static rg_json_t *node(rg_json_type_t type) {
  rg_json_t *v = rg_alloc(sizeof *v);
  *v = (rg_json_t){.type = type};
  return v;
}

static bool hex4(const char *p, const char *end, unsigned *out) {
  if (end - p < 4) return false;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return false;
  }
  *out = v;
  return true;
}

// The bytes that end a run of plain string content: control characters, '"' and '\\'.
// A table, because the test for most bytes is then one load (it made parsing ~10 % cheaper).
static const bool STOPS[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,  // 0x00-0x0f
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,  // 0x10-0x1f
    ['"'] = 1,
    ['\\'] = 1,
};

// Checks the string at ps->p (its opening quote) and leaves its span in *out.
static bool string(parser_t *ps, text_t *out) {
  const char *open = ps->p + 1, *end = ps->end;
  bool escaped = false;
  unsigned cp;
  for (const char *p = open; p < end; p++) {
    unsigned char c = (unsigned char)*p;
    if (!STOPS[c]) continue;
    if (c == '"') {
      *out = (text_t){open, (size_t)(p - open), escaped ? ESCAPED : PLAIN};
      ps->p = p + 1;
      return true;
    }
    if (c < 0x20) {
      ps->p = p;
      fail(ps, "control character in string");
      return false;
    }
    escaped = true;  // c is the backslash

    ps->p = p++;
    if (p >= end) break;
    switch (*p) {
      case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': break;
      case 'u':
        if (!hex4(p + 1, end, &cp)) {
          fail(ps, "bad \\u escape");
          return false;
        }
        p += 4;
        break;
      default:
        fail(ps, "bad escape");
        return false;
    }
  }
  ps->p = open - 1;
  fail(ps, "unterminated string");
  return false;
}

static char *put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    *o++ = (char)cp;
  } else if (cp < 0x800) {
    *o++ = (char)(0xC0 | (cp >> 6));
    *o++ = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *o++ = (char)(0xE0 | (cp >> 12));
    *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
    *o++ = (char)(0x80 | (cp & 0x3F));
  } else {
    *o++ = (char)(0xF0 | (cp >> 18));
    *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
    *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
    *o++ = (char)(0x80 | (cp & 0x3F));
  }
  return o;
}

// The text decoded (escapes, surrogate pairs) into the arena, NUL-terminated; `string` checked
// it already. Decoding never makes a string longer than its escaped form.
static const char *decode(const text_t *const_text) {
  text_t *t = (text_t *)const_text;
  if (t->state == DECODED) return t->ptr;
  if (t->state == PLAIN) {
    t->ptr = rg_strndup(t->ptr, t->len);
    t->state = DECODED;
    return t->ptr;
  }
  char *out = rg_alloc(t->len + 1), *o = out;
  const char *p = t->ptr, *end = t->ptr + t->len;
  while (p < end) {
    if (*p != '\\') {
      *o++ = *p++;
      continue;
    }
    p++;
    switch (*p++) {
      case 'b': *o++ = '\b'; break;
      case 'f': *o++ = '\f'; break;
      case 'n': *o++ = '\n'; break;
      case 'r': *o++ = '\r'; break;
      case 't': *o++ = '\t'; break;
      case 'u': {
        unsigned cp, low;
        hex4(p, end, &cp);
        p += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u' &&
            hex4(p + 2, end, &low) && low >= 0xDC00 && low < 0xE000) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          p += 6;
        } else if (cp >= 0xD800 && cp < 0xE000) {
          cp = 0xFFFD;  // a lone surrogate has no UTF-8 form
        }
        o = put_utf8(o, cp);
        break;
      }
      default: *o++ = p[-1]; break;  // \" \\ \/
    }
  }
  *o = '\0';
  t->ptr = out;
  t->len = (size_t)(o - out);
  t->state = DECODED;
  return out;
}

static const char *digits(const char *p, const char *end) {
  while (p < end && *p >= '0' && *p <= '9') p++;
  return p;
}

static rg_json_t *number(parser_t *ps) {
  const char *p = ps->p, *end = ps->end;
  if (p < end && *p == '-') p++;
  if (p < end && *p == '0') {
    p++;
  } else {
    const char *q = digits(p, end);
    if (q == p) return fail(ps, "unexpected character");
    p = q;
  }
  if (p < end && *p == '.') {
    const char *q = digits(p + 1, end);
    if (q == p + 1) return fail(ps, "bad number");
    p = q;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    const char *q = digits(p, end);
    if (q == p) return fail(ps, "bad number");
    p = q;
  }
  rg_json_t *v = node(RG_JSON_NUMBER);
  v->as.scalar = (text_t){ps->p, (size_t)(p - ps->p), PLAIN};
  ps->p = p;
  return v;
}

static rg_json_t *literal(parser_t *ps, const char *word, rg_json_type_t type, bool boolean) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
    return fail(ps, "unexpected character");
  ps->p += n;
  rg_json_t *v = node(type);
  v->as.boolean = boolean;
  return v;
}

static rg_json_t *value(parser_t *ps);

static rg_json_t *container(parser_t *ps, char close) {
  if (++ps->depth > MAX_DEPTH) return fail(ps, "nested too deeply");
  rg_json_t *v = node(close == '}' ? RG_JSON_OBJECT : RG_JSON_ARRAY);
  rg_json_t **tail = &v->as.children.first;
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
    ps->depth--;
    return v;
  }
  for (;;) {
    text_t key = {0};
    if (close == '}') {
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != '"') return fail(ps, "expected a member name");
      if (!string(ps, &key)) return NULL;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') return fail(ps, "expected ':'");
      ps->p++;
    }
    rg_json_t *child = value(ps);
    if (child == NULL) return NULL;
    child->key = key;
    *tail = child;
    tail = &child->next;
    v->as.children.len++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
    } else if (ps->p < ps->end && *ps->p == close) {
      ps->p++;
      ps->depth--;
      return v;
    } else {
      return fail(ps, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }
}

static rg_json_t *value(parser_t *ps) {
  skip_ws(ps);
  if (ps->p >= ps->end) return fail(ps, "unexpected end");
  switch (*ps->p) {
    case '{': return container(ps, '}');
    case '[': return container(ps, ']');
    case '"': {
      rg_json_t *v = node(RG_JSON_STRING);
      return string(ps, &v->as.scalar) ? v : NULL;
    }
    case 't': return literal(ps, "true", RG_JSON_BOOL, true);
    case 'f': return literal(ps, "false", RG_JSON_BOOL, false);
    case 'n': return literal(ps, "null", RG_JSON_NULL, false);
    default: return number(ps);
  }
}

const rg_json_t *rg_json_parse_in_place(const char *text, size_t len) {
  parser_t ps = {.start = text, .p = text, .end = text + len};
  rg_json_t *v = value(&ps);
  if (v == NULL) return NULL;
  skip_ws(&ps);
  if (ps.p != ps.end) return fail(&ps, "text after the value");
  return v;
}

const rg_json_t *rg_json_parse(const char *text, size_t len) {
  return rg_json_parse_in_place(rg_strndup(text, len), len);
}

const rg_json_t *rg_json_array_of(const rg_json_t **items, size_t len) {
  rg_json_t *array = node(RG_JSON_ARRAY);
  rg_json_t **tail = &array->as.children.first;
  for (size_t i = 0; i < len; i++) {
    *tail = (rg_json_t *)items[i];
    tail = &(*tail)->next;
  }
  array->as.children.len = len;
  return array;
}

// ---------------------------------------------------------------------------------------------
// Reading

rg_json_type_t rg_json_type(const rg_json_t *value) {
  return value == NULL ? RG_JSON_ABSENT : value->type;
}

const rg_json_t *rg_json_get(const rg_json_t *object, const char *key) {
  if (rg_json_type(object) != RG_JSON_OBJECT) return NULL;
  size_t len = strlen(key);
  for (const rg_json_t *m = object->as.children.first; m != NULL; m = m->next) {
    if (m->key.state == ESCAPED) decode(&m->key);
    if (m->key.len == len && memcmp(m->key.ptr, key, len) == 0) return m;
  }
  return NULL;
}

const rg_json_t *rg_json_path_(const rg_json_t *value, ...) {
  va_list keys;
  va_start(keys, value);
  for (const char *key; value != NULL && (key = va_arg(keys, const char *)) != NULL;)
    value = rg_json_get(value, key);
  va_end(keys);
  return value;
}

static bool is_container(const rg_json_t *v) {
  return v != NULL && (v->type == RG_JSON_ARRAY || v->type == RG_JSON_OBJECT);
}

size_t rg_json_len(const rg_json_t *value) {
  return is_container(value) ? value->as.children.len : 0;
}

const rg_json_t *rg_json_first(const rg_json_t *container) {
  return is_container(container) ? container->as.children.first : NULL;
}

const rg_json_t *rg_json_next(const rg_json_t *item) { return item == NULL ? NULL : item->next; }

const rg_json_t *rg_json_at(const rg_json_t *container, size_t index) {
  const rg_json_t *item = rg_json_first(container);
  for (; item != NULL && index > 0; index--) item = item->next;
  return item;
}

const char *rg_json_key(const rg_json_t *member) {
  return member == NULL || member->key.ptr == NULL ? NULL : decode(&member->key);
}

const char *rg_json_string(const rg_json_t *value) {
  return rg_json_type(value) == RG_JSON_STRING ? decode(&value->as.scalar) : NULL;
}

size_t rg_json_string_len(const rg_json_t *value) {
  if (rg_json_type(value) != RG_JSON_STRING) return 0;
  decode(&value->as.scalar);
  return value->as.scalar.len;
}

bool rg_json_bool(const rg_json_t *value, bool *out) {
  if (rg_json_type(value) != RG_JSON_BOOL) return false;
  *out = value->as.boolean;
  return true;
}

const char *rg_json_number_text(const rg_json_t *value) {
  return rg_json_type(value) == RG_JSON_NUMBER ? decode(&value->as.scalar) : NULL;
}

bool rg_json_is_integer(const rg_json_t *value) {
  if (rg_json_type(value) != RG_JSON_NUMBER) return false;
  const text_t *t = &value->as.scalar;
  for (size_t i = 0; i < t->len; i++) {
    if (t->ptr[i] == '.' || t->ptr[i] == 'e' || t->ptr[i] == 'E') return false;
  }
  return true;
}

bool rg_json_int(const rg_json_t *value, int64_t *out) {
  if (!rg_json_is_integer(value)) return false;
  const char *p = value->as.scalar.ptr, *end = p + value->as.scalar.len;
  bool negative = *p == '-';
  if (negative) p++;
  uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  uint64_t magnitude = 0;
  for (; p < end; p++) {
    unsigned digit = (unsigned)(*p - '0');
    if (magnitude > (limit - digit) / 10) return false;
    magnitude = magnitude * 10 + digit;
  }
  *out = negative ? (int64_t)(0 - magnitude) : (int64_t)magnitude;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Writing

void rg_sink_quote(rg_sink_t *sink, const char *text, size_t len) {
  rg_sink_put(sink, "\"", 1);
  const char *run = text;  // bytes that need no escape are written in runs
  for (const char *p = text; p < text + len; p++) {
    unsigned char c = (unsigned char)*p;
    const char *escape = NULL;
    switch (c) {
      case '"': escape = "\\\""; break;
      case '\\': escape = "\\\\"; break;
      case '\b': escape = "\\b"; break;
      case '\f': escape = "\\f"; break;
      case '\n': escape = "\\n"; break;
      case '\r': escape = "\\r"; break;
      case '\t': escape = "\\t"; break;
      default: if (c >= 0x20) continue;
    }
    rg_sink_put(sink, run, (size_t)(p - run));
    run = p + 1;
    if (escape != NULL) rg_sink_puts(sink, escape);
    else rg_sink_format(sink, "\\u%04x", c);
  }
  rg_sink_put(sink, run, (size_t)(text + len - run));
  rg_sink_put(sink, "\"", 1);
}

typedef struct quote_arg {
  const char *text;
  size_t len;
} quote_arg_t;

static void render_quote(rg_sink_t *sink, const void *arg) {
  const quote_arg_t *q = arg;
  rg_sink_quote(sink, q->text, q->len);
}

const char *rg_json_quote_n(const char *text, size_t len) {
  return rg_render(render_quote, &(quote_arg_t){text, len});
}

const char *rg_json_quote(const char *text) { return rg_json_quote_n(text, strlen(text)); }

static void serialize(rg_sink_t *sink, const rg_json_t *v) {
  switch (rg_json_type(v)) {
    case RG_JSON_ABSENT:
    case RG_JSON_NULL: rg_sink_puts(sink, "null"); break;
    case RG_JSON_BOOL: rg_sink_puts(sink, v->as.boolean ? "true" : "false"); break;
    case RG_JSON_NUMBER: rg_sink_put(sink, v->as.scalar.ptr, v->as.scalar.len); break;
    case RG_JSON_STRING:
      decode(&v->as.scalar);
      rg_sink_quote(sink, v->as.scalar.ptr, v->as.scalar.len);
      break;
    case RG_JSON_ARRAY:
    case RG_JSON_OBJECT: {
      bool object = v->type == RG_JSON_OBJECT;
      rg_sink_put(sink, object ? "{" : "[", 1);
      for (const rg_json_t *child = v->as.children.first; child != NULL; child = child->next) {
        if (child != v->as.children.first) rg_sink_put(sink, ",", 1);
        if (object) {
          decode(&child->key);
          rg_sink_quote(sink, child->key.ptr, child->key.len);
          rg_sink_put(sink, ":", 1);
        }
        serialize(sink, child);
      }
      rg_sink_put(sink, object ? "}" : "]", 1);
      break;
    }
  }
}

static void render_value(rg_sink_t *sink, const void *arg) { serialize(sink, arg); }

const char *rg_json_serialize(const rg_json_t *value) { return rg_render(render_value, value); }
