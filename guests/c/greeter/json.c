// See json.h. Hand-written because a guest can only use what compiles to wasm32-wasi with no
// package manager in the loop; it is small enough to read in one sitting.
#include "json.h"

#include <stdlib.h>
#include <string.h>

const char *json_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

static const char *skip_string(const char *p, const char *end) {
  if (p >= end || *p != '"') return NULL;
  for (p++; p < end; p++) {
    if (*p == '\\') {
      p++;
    } else if (*p == '"') {
      return p + 1;
    }
  }
  return NULL;
}

static const char *skip_literal(const char *p, const char *end, const char *word) {
  size_t n = strlen(word);
  return (size_t)(end - p) >= n && memcmp(p, word, n) == 0 ? p + n : NULL;
}

static const char *skip_number(const char *p, const char *end) {
  const char *start = p;
  while (p < end && strchr("+-0123456789.eE", *p) != NULL) p++;
  return p > start ? p : NULL;
}

static const char *skip_container(const char *p, const char *end, char close) {
  p = json_ws(p + 1, end);
  if (p < end && *p == close) return p + 1;
  while (p != NULL && p < end) {
    if (close == '}') {
      p = skip_string(json_ws(p, end), end);
      if (p == NULL) return NULL;
      p = json_ws(p, end);
      if (p >= end || *p != ':') return NULL;
      p++;
    }
    p = json_skip(p, end);
    if (p == NULL) return NULL;
    p = json_ws(p, end);
    if (p < end && *p == ',') {
      p++;
    } else if (p < end && *p == close) {
      return p + 1;
    } else {
      return NULL;
    }
  }
  return NULL;
}

const char *json_skip(const char *p, const char *end) {
  p = json_ws(p, end);
  if (p >= end) return NULL;
  switch (*p) {
    case '"': return skip_string(p, end);
    case '{': return skip_container(p, end, '}');
    case '[': return skip_container(p, end, ']');
    case 't': return skip_literal(p, end, "true");
    case 'f': return skip_literal(p, end, "false");
    case 'n': return skip_literal(p, end, "null");
    default: return skip_number(p, end);
  }
}

const char *json_member(const char *p, const char *end, const char *key) {
  if (p == NULL) return NULL;
  p = json_ws(p, end);
  if (p >= end || *p != '{') return NULL;
  size_t key_len = strlen(key);
  p = json_ws(p + 1, end);
  while (p < end && *p == '"') {
    const char *name_end = skip_string(p, end);
    if (name_end == NULL) return NULL;
    // Kubernetes field names need no escapes; an escaped name simply never matches.
    int match = (size_t)(name_end - p - 2) == key_len && memcmp(p + 1, key, key_len) == 0;
    p = json_ws(name_end, end);
    if (p >= end || *p != ':') return NULL;
    p = json_ws(p + 1, end);
    if (match) return p;
    p = json_skip(p, end);
    if (p == NULL) return NULL;
    p = json_ws(p, end);
    if (p < end && *p == ',') p = json_ws(p + 1, end);
  }
  return NULL;
}

const char *json_type_name(const char *p, const char *end) {
  p = json_ws(p, end);
  if (p >= end) return "NoneType";
  switch (*p) {
    case '"': return "str";
    case '{': return "dict";
    case '[': return "list";
    case 't': case 'f': return "bool";
    case 'n': return "NoneType";
    default: {
      const char *q = skip_number(p, end);
      for (; q != NULL && p < q; p++) {
        if (*p == '.' || *p == 'e' || *p == 'E') return "float";
      }
      return "int";
    }
  }
}

static int hex4(const char *p, const char *end, unsigned *out) {
  if (end - p < 4) return 0;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return 0;
  }
  *out = v;
  return 1;
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

char *json_string(const char *p, const char *end, size_t *len) {
  p = json_ws(p, end);
  const char *stop = skip_string(p, end);
  if (stop == NULL) return NULL;
  // Decoding never makes a string longer than its escaped form.
  char *out = malloc((size_t)(stop - p));
  if (out == NULL) return NULL;
  char *o = out;
  for (p++; p < stop - 1; p++) {
    if (*p != '\\') {
      *o++ = *p;
      continue;
    }
    p++;
    switch (*p) {
      case 'b': *o++ = '\b'; break;
      case 'f': *o++ = '\f'; break;
      case 'n': *o++ = '\n'; break;
      case 'r': *o++ = '\r'; break;
      case 't': *o++ = '\t'; break;
      case 'u': {
        unsigned cp, low;
        if (!hex4(p + 1, stop, &cp)) goto bad;
        p += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && p + 2 < stop && p[1] == '\\' && p[2] == 'u' &&
            hex4(p + 3, stop, &low) && low >= 0xDC00 && low < 0xE000) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          p += 6;
        }
        o = put_utf8(o, cp);
        break;
      }
      default: *o++ = *p; break;  // \" \\ \/
    }
  }
  *o = '\0';
  *len = (size_t)(o - out);
  return out;
bad:
  free(out);
  return NULL;
}
