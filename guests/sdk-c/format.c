// printf-style formatting without stdio. Written here rather than taken from wasi-libc because
// its printf family (even snprintf) costs every guest ~16 KB and imports WASI's fd_write,
// fd_seek and fd_close, which a component then has to be given; this covers what log lines,
// messages and JSON templates use, in ~150 lines.
#include <string.h>

#include "rg_internal.h"

void rg_sink_put(rg_sink_t *sink, const char *text, size_t len) {
  if (sink->len < sink->cap) {
    size_t room = sink->cap - sink->len;
    memcpy(sink->buf + sink->len, text, len < room ? len : room);
  }
  sink->len += len;
}

void rg_sink_puts(rg_sink_t *sink, const char *text) { rg_sink_put(sink, text, strlen(text)); }

static void pad(rg_sink_t *sink, char c, size_t n) {
  for (; n > 0; n--) rg_sink_put(sink, &c, 1);
}

typedef struct spec {
  bool left, zero, plus, space;
  size_t width;
  int precision;  // -1: none
} spec_t;

// `body` of `len` bytes, after `prefix` (a sign or 0x), padded to the width.
static void field(rg_sink_t *sink, const spec_t *spec, const char *prefix, const char *body,
                  size_t len, size_t zeros) {
  size_t n = strlen(prefix) + zeros + len;
  size_t fill = spec->width > n ? spec->width - n : 0;
  if (!spec->left && !spec->zero) pad(sink, ' ', fill);
  rg_sink_puts(sink, prefix);
  if (!spec->left && spec->zero) pad(sink, '0', fill);
  pad(sink, '0', zeros);
  rg_sink_put(sink, body, len);
  if (spec->left) pad(sink, ' ', fill);
}

static void integer(rg_sink_t *sink, spec_t spec, uintmax_t magnitude, bool negative,
                    unsigned base, bool upper, const char *prefix) {
  char digits[3 * sizeof(uintmax_t)];
  size_t n = 0;
  const char *alphabet = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  do {
    digits[sizeof digits - ++n] = alphabet[magnitude % base];
    magnitude /= base;
  } while (magnitude > 0);
  if (spec.precision == 0 && n == 1 && digits[sizeof digits - 1] == '0') n = 0;
  size_t zeros = spec.precision > 0 && (size_t)spec.precision > n ? (size_t)spec.precision - n : 0;
  if (spec.precision >= 0) spec.zero = false;  // as printf: a precision turns off the 0 flag
  if (negative) prefix = "-";
  else if (*prefix == '\0' && spec.plus) prefix = "+";
  else if (*prefix == '\0' && spec.space) prefix = " ";
  field(sink, &spec, prefix, digits + sizeof digits - n, n, zeros);
}

typedef enum { LEN_INT, LEN_CHAR, LEN_SHORT, LEN_LONG, LEN_LLONG, LEN_SIZE, LEN_MAX, LEN_PTRDIFF,
               LEN_LDOUBLE } length_t;

static intmax_t signed_arg(va_list *args, length_t length) {
  switch (length) {
    case LEN_CHAR: return (signed char)va_arg(*args, int);
    case LEN_SHORT: return (short)va_arg(*args, int);
    case LEN_LONG: return va_arg(*args, long);
    case LEN_LLONG: return va_arg(*args, long long);
    case LEN_SIZE: return va_arg(*args, ptrdiff_t);  // the signed size_t
    case LEN_MAX: return va_arg(*args, intmax_t);
    case LEN_PTRDIFF: return va_arg(*args, ptrdiff_t);
    default: return va_arg(*args, int);
  }
}

static uintmax_t unsigned_arg(va_list *args, length_t length) {
  switch (length) {
    case LEN_CHAR: return (unsigned char)va_arg(*args, unsigned);
    case LEN_SHORT: return (unsigned short)va_arg(*args, unsigned);
    case LEN_LONG: return va_arg(*args, unsigned long);
    case LEN_LLONG: return va_arg(*args, unsigned long long);
    case LEN_SIZE: return va_arg(*args, size_t);
    case LEN_MAX: return va_arg(*args, uintmax_t);
    case LEN_PTRDIFF: return (uintmax_t)va_arg(*args, ptrdiff_t);
    default: return va_arg(*args, unsigned);
  }
}

static const char *length_of(const char *p, length_t *length) {
  switch (*p) {
    case 'h': if (p[1] == 'h') { *length = LEN_CHAR; return p + 2; } *length = LEN_SHORT; return p + 1;
    case 'l': if (p[1] == 'l') { *length = LEN_LLONG; return p + 2; } *length = LEN_LONG; return p + 1;
    case 'z': *length = LEN_SIZE; return p + 1;
    case 'j': *length = LEN_MAX; return p + 1;
    case 't': *length = LEN_PTRDIFF; return p + 1;
    case 'L': *length = LEN_LDOUBLE; return p + 1;
    default: *length = LEN_INT; return p;
  }
}

// The va_list travels by pointer so that the helpers above consume it (C lets a callee's use
// of a va_list passed by value leave the caller's indeterminate).
static void vformat(rg_sink_t *sink, const char *fmt, va_list *args) {
  const char *p = fmt;
  while (*p != '\0') {
    const char *literal = p;
    while (*p != '\0' && *p != '%') p++;
    rg_sink_put(sink, literal, (size_t)(p - literal));
    if (*p == '\0') break;
    const char *conversion_start = p++;
    spec_t spec = {.precision = -1};
    for (;; p++) {
      if (*p == '-') spec.left = true;
      else if (*p == '0') spec.zero = true;
      else if (*p == '+') spec.plus = true;
      else if (*p == ' ') spec.space = true;
      else if (*p != '#') break;
    }
    if (*p == '*') {
      int width = va_arg(*args, int);
      spec.left |= width < 0;
      spec.width = width < 0 ? -(size_t)width : (size_t)width;
      p++;
    }
    for (; *p >= '0' && *p <= '9'; p++) spec.width = spec.width * 10 + (size_t)(*p - '0');
    if (*p == '.') {
      p++;
      spec.precision = 0;
      if (*p == '*') {
        spec.precision = va_arg(*args, int);
        if (spec.precision < 0) spec.precision = -1;
        p++;
      }
      for (; *p >= '0' && *p <= '9'; p++) spec.precision = spec.precision * 10 + (*p - '0');
    }
    length_t length;
    p = length_of(p, &length);
    switch (*p) {
      case '%': rg_sink_put(sink, "%", 1); break;
      case 'c': {
        char c = (char)va_arg(*args, int);
        field(sink, &(spec_t){.left = spec.left, .width = spec.width}, "", &c, 1, 0);
        break;
      }
      case 's': {
        const char *text = va_arg(*args, const char *);
        if (text == NULL) text = "(null)";
        size_t n = 0;
        while (text[n] != '\0' && (spec.precision < 0 || n < (size_t)spec.precision)) n++;
        field(sink, &(spec_t){.left = spec.left, .width = spec.width}, "", text, n, 0);
        break;
      }
      case 'd': case 'i': {
        intmax_t v = signed_arg(args, length);
        integer(sink, spec, v < 0 ? -(uintmax_t)v : (uintmax_t)v, v < 0, 10, false, "");
        break;
      }
      case 'u': integer(sink, spec, unsigned_arg(args, length), false, 10, false, ""); break;
      case 'x': integer(sink, spec, unsigned_arg(args, length), false, 16, false, ""); break;
      case 'X': integer(sink, spec, unsigned_arg(args, length), false, 16, true, ""); break;
      case 'p':
        integer(sink, spec, (uintptr_t)va_arg(*args, void *), false, 16, false, "0x");
        break;
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A':
        if (length == LEN_LDOUBLE) (void)va_arg(*args, long double);
        else (void)va_arg(*args, double);
        rg_sink_put(sink, "?", 1);
        break;
      default:  // not a conversion (or the format ends): as written
        if (*p == '\0') p--;
        rg_sink_put(sink, conversion_start, (size_t)(p + 1 - conversion_start));
        break;
    }
    p++;
  }
}

void rg_sink_vformat(rg_sink_t *sink, const char *fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  vformat(sink, fmt, &copy);
  va_end(copy);
}

void rg_sink_format(rg_sink_t *sink, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  rg_sink_vformat(sink, fmt, args);
  va_end(args);
}

// Text is written once into a buffer on the stack and copied into the arena, or, when it is
// longer, measured there and written again into the arena.
#define SHORT_TEXT 512

const char *rg_vformat(const char *fmt, va_list args) {
  char local[SHORT_TEXT];
  rg_sink_t first = {.buf = local, .cap = sizeof local};
  rg_sink_vformat(&first, fmt, args);
  if (first.len < sizeof local) return rg_strndup(local, first.len);
  rg_sink_t out = {.buf = rg_alloc(first.len + 1), .cap = first.len + 1};
  rg_sink_vformat(&out, fmt, args);
  out.buf[first.len] = '\0';
  return out.buf;
}

const char *rg_format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  const char *text = rg_vformat(fmt, args);
  va_end(args);
  return text;
}

const char *rg_render(void (*render)(rg_sink_t *sink, const void *arg), const void *arg) {
  char local[SHORT_TEXT];
  rg_sink_t first = {.buf = local, .cap = sizeof local};
  render(&first, arg);
  if (first.len < sizeof local) return rg_strndup(local, first.len);
  rg_sink_t out = {.buf = rg_alloc(first.len + 1), .cap = first.len + 1};
  render(&out, arg);
  out.buf[first.len] = '\0';
  return out.buf;
}
