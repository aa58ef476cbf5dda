// Failures of host calls (rg_err_t and the last error's text) and the results of `reconcile`.
#include "rg_internal.h"

static const char *last_error = "";

const char *rg_err_name(rg_err_t err) {
  switch (err) {
    case RG_OK: return "ok";
    case RG_DENIED: return "denied";
    case RG_NOT_FOUND: return "not-found";
    case RG_CONFLICT: return "conflict";
    case RG_INVALID: return "invalid";
    case RG_UNAVAILABLE: return "unavailable";
    default: return "other";
  }
}

// The table in reconciler.h (rg_from_error) says why.
bool rg_err_is_transient(rg_err_t err) {
  return err == RG_CONFLICT || err == RG_UNAVAILABLE || err == RG_OTHER;
}

const char *rg_last_error(void) { return last_error; }

void rg_last_error_clear(void) { last_error = ""; }

rg_err_t rg_fail(rg_err_t kind, const char *text, size_t len) {
  last_error = rg_strndup(text, len);
  return kind;
}

rg_result_t rg_await_change(void) { return (rg_result_t){.kind = RG_RESULT_OK}; }

rg_result_t rg_requeue_after_ms(uint64_t ms) {
  return (rg_result_t){.kind = RG_RESULT_OK, .requeue = true, .requeue_after_ms = ms};
}

rg_result_t rg_transient(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  rg_result_t result = {.kind = RG_RESULT_TRANSIENT, .message = rg_vformat(fmt, args)};
  va_end(args);
  return result;
}

rg_result_t rg_permanent(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  rg_result_t result = {.kind = RG_RESULT_PERMANENT, .message = rg_vformat(fmt, args)};
  va_end(args);
  return result;
}

rg_result_t rg_from_error(rg_err_t err, const char *context_fmt, ...) {
  va_list args;
  va_start(args, context_fmt);
  const char *context = rg_vformat(context_fmt, args);
  va_end(args);
  return (rg_result_t){
      .kind = rg_err_is_transient(err) ? RG_RESULT_TRANSIENT : RG_RESULT_PERMANENT,
      .message = rg_format("%s: %s: %s", context, rg_err_name(err), rg_last_error()),
  };
}
