// status.conditions in the metav1.Condition shape; the rule is apimachinery's
// meta.SetStatusCondition, as in the Rust SDK (guests/sdk/src/conditions.rs).
#include <string.h>
#include <time.h>

#include "rg_internal.h"

static bool same(const char *a, const char *b) {
  return strcmp(a != NULL ? a : "", b != NULL ? b : "") == 0;
}

// Days since 1970-01-01 to a civil date: Howard Hinnant's `civil_from_days`
// (http://howardhinnant.github.io/date_algorithms.html), exact for every int64 day count we
// meet. Why not gmtime: wasi-libc's pulls in its time-zone machinery for one conversion.
void rg_rfc3339(int64_t seconds, char out[21]) {
  int64_t days = seconds / 86400, rem = seconds % 86400;
  if (rem < 0) {
    rem += 86400;
    days--;
  }
  int64_t z = days + 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  int64_t day = doy - (153 * mp + 2) / 5 + 1;
  int64_t month = mp < 10 ? mp + 3 : mp - 9;
  int64_t year = yoe + era * 400 + (month <= 2);
  rg_sink_t sink = {.buf = out, .cap = 20};
  rg_sink_format(&sink, "%04lld-%02lld-%02lldT%02lld:%02lld:%02lldZ", (long long)year,
                 (long long)month, (long long)day, (long long)(rem / 3600),
                 (long long)(rem / 60 % 60), (long long)(rem % 60));
  out[sink.len < 20 ? sink.len : 20] = '\0';
}

const char *rg_now(void) {
  char text[21];
  rg_rfc3339((int64_t)time(NULL), text);
  return rg_strndup(text, strlen(text));
}

rg_condition_t rg_condition(const char *type, bool status, const char *reason,
                            const char *message) {
  return (rg_condition_t){
      .type = type,
      .status = status ? "True" : "False",
      .reason = reason,
      .message = message,
      .last_transition_time = rg_now(),
  };
}

rg_conditions_t rg_conditions_read(const rg_json_t *object) {
  const rg_json_t *list = rg_json_path(object, "status", "conditions");
  rg_conditions_t conditions = {0};
  if (rg_json_type(list) != RG_JSON_ARRAY) return conditions;
  conditions.cap_ = rg_json_len(list);
  conditions.items = rg_alloc(conditions.cap_ * sizeof *conditions.items);
  for (const rg_json_t *c = rg_json_first(list); c != NULL; c = rg_json_next(c)) {
    if (rg_json_type(c) != RG_JSON_OBJECT) continue;
    rg_condition_t *out = &conditions.items[conditions.len++];
    *out = (rg_condition_t){
        .type = rg_json_string(rg_json_get(c, "type")),
        .status = rg_json_string(rg_json_get(c, "status")),
        .reason = rg_json_string(rg_json_get(c, "reason")),
        .message = rg_json_string(rg_json_get(c, "message")),
        .last_transition_time = rg_json_string(rg_json_get(c, "lastTransitionTime")),
    };
    rg_json_int(rg_json_get(c, "observedGeneration"), &out->observed_generation);
  }
  return conditions;
}

const rg_condition_t *rg_conditions_find(const rg_conditions_t *conditions, const char *type) {
  for (size_t i = 0; i < conditions->len; i++) {
    if (same(conditions->items[i].type, type)) return &conditions->items[i];
  }
  return NULL;
}

bool rg_conditions_is_true(const rg_conditions_t *conditions, const char *type) {
  const rg_condition_t *c = rg_conditions_find(conditions, type);
  return c != NULL && same(c->status, "True");
}

bool rg_conditions_set(rg_conditions_t *conditions, rg_condition_t condition) {
  rg_condition_t *existing = (rg_condition_t *)rg_conditions_find(conditions, condition.type);
  if (existing == NULL) {
    if (conditions->len == conditions->cap_) {
      size_t cap = conditions->cap_ < 4 ? 4 : 2 * conditions->cap_;
      rg_condition_t *items = rg_alloc(cap * sizeof *items);
      if (conditions->len > 0) memcpy(items, conditions->items, conditions->len * sizeof *items);
      conditions->items = items;
      conditions->cap_ = cap;
    }
    conditions->items[conditions->len++] = condition;
    return true;
  }
  bool changed = false;
  if (!same(existing->status, condition.status)) {
    existing->status = condition.status;
    existing->last_transition_time = condition.last_transition_time;
    changed = true;
  }
  if (!same(existing->reason, condition.reason)) {
    existing->reason = condition.reason;
    changed = true;
  }
  if (!same(existing->message, condition.message)) {
    existing->message = condition.message;
    changed = true;
  }
  if (existing->observed_generation != condition.observed_generation) {
    existing->observed_generation = condition.observed_generation;
    changed = true;
  }
  return changed;
}

static void member(rg_sink_t *sink, const char *name, const char *value) {
  if (value == NULL) return;
  rg_sink_format(sink, ",\"%s\":", name);
  rg_sink_quote(sink, value, strlen(value));
}

static void render(rg_sink_t *sink, const void *arg) {
  const rg_conditions_t *conditions = arg;
  rg_sink_put(sink, "[", 1);
  for (size_t i = 0; i < conditions->len; i++) {
    const rg_condition_t *c = &conditions->items[i];
    rg_sink_puts(sink, i == 0 ? "{\"type\":" : ",{\"type\":");
    rg_sink_quote(sink, c->type != NULL ? c->type : "", c->type != NULL ? strlen(c->type) : 0);
    member(sink, "status", c->status);
    if (c->observed_generation != 0)
      rg_sink_format(sink, ",\"observedGeneration\":%lld", (long long)c->observed_generation);
    member(sink, "lastTransitionTime", c->last_transition_time);
    member(sink, "reason", c->reason);
    member(sink, "message", c->message);
    rg_sink_put(sink, "}", 1);
  }
  rg_sink_put(sink, "]", 1);
}

const char *rg_conditions_json(const rg_conditions_t *conditions) {
  return rg_render(render, conditions);
}
