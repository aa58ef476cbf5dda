// The C SDK for reconciler-host guests.
//
// **A guest is two functions; start here.** Define `manifest` (what you want watched) and
// `reconcile` (what one `reconcile(key)` does); the SDK exports them as the component's
// `reconciler` interface of wit/reconciler.wit (the contract):
//
//     #include "reconciler.h"
//
//     rg_manifest_t manifest(void) {
//       return (rg_manifest_t){.name = "hello", .primary = {"example.com", "v1", "Hello"}};
//     }
//
//     rg_result_t reconcile(rg_request_t *req) {
//       rg_info("reconciling %s", req->ref.name);
//       return rg_await_change();
//     }
//
// The host calls `manifest` once when it loads the component and `reconcile` for every key,
// each call in a fresh instance: keep no state between calls; read it from the request, the
// lister or the cluster instead.
//
// Everything else is à la carte, one section below per concept (and per host interface):
//
//   manifest     rg_manifest_t: defaults are zero, set only what you need; rg_watch_t for
//                watches beyond owner and label (world watching-controller); rg_index_t for
//                indexes the guest computes from each primary (world indexing-controller)
//   request      rg_request_t, its object parsed on first use (rg_request_object)
//   results      rg_await_change, rg_requeue_after_ms, rg_transient, rg_permanent, rg_from_error
//   errors       rg_err_t: what every host call returns (RG_OK = 0), rg_last_error() its text
//   json         reading (rg_json_get, rg_json_path, ...) and writing (rg_format, rg_json_quote)
//   log          rg_info("...%s", ...) and friends: printf-style, into the host's log stream
//   lister       cache reads: rg_lister_get, rg_lister_list
//   cluster      writes: rg_cluster_patch_status, rg_cluster_apply, rg_cluster_apply_with,
//                rg_cluster_delete
//   event        Kubernetes events: rg_event_normal, rg_event_warning (best effort), rg_event_record
//   queue        rg_queue_enqueue, rg_queue_enqueue_after_ms
//   conditions   status.conditions with a stable lastTransitionTime
//
// A guest's native unit tests link the fake host in testing/ (reconciler_testing.h), which runs
// its map, index and reconcile functions as the host would, against objects the test loads.
//
// Memory: nothing the SDK hands you is yours to free. Every string and value it returns (the
// request, parsed JSON, rg_format's text, the host's error text, objects the host returns)
// lives in an arena that the SDK frees when `manifest` or `reconcile` returns; the host's own
// buffers (the generated bindings' `*_free` functions) are freed by the SDK too. So: use them
// freely during the call, keep none of them past it. Strings you pass in are only read during
// the call, and may be literals. (The host discards the whole instance after each call anyway;
// freeing still matters for the SDK's own tests, which run natively under a leak checker.)
//
// Strings are UTF-8 and NUL-terminated. A JSON string holding `\u0000` is cut there by the
// `char *` views; rg_json_string_len gives its full length.
//
// Cost: the SDK uses no stdio (its own printf-style formatter, see rg_format) and no WASI but
// the clock, and that only in a guest that stamps a condition (rg_now): a guest that logs,
// formats and parses JSON imports nothing but the contract's interfaces.
//
// Broken contract: text the host passes as JSON (the request's object, what the lister and the
// cluster return) that does not parse, and running out of memory, are not errors a guest can
// handle: the SDK logs what happened at error level and traps (abort), and the host reports the
// trap and that line as the reconcile's error.
#ifndef RECONCILER_H
#define RECONCILER_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define RG_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define RG_PRINTF(fmt, args)
#endif

// ---------------------------------------------------------------------------------------------
// Naming objects

// Group, version and kind. The core group is "".
typedef struct rg_gvk {
  const char *group;
  const char *version;
  const char *kind;
} rg_gvk_t;

// One object. `namespace` is NULL for cluster-scoped kinds. (Passed by pointer.)
typedef struct rg_ref {
  rg_gvk_t kind;
  const char *namespace;
  const char *name;
} rg_ref_t;

// A key of the guest's own work queue: namespace (NULL when cluster-scoped) and name.
typedef struct rg_key {
  const char *namespace;
  const char *name;
} rg_key_t;

// The `apiVersion` an object of `kind` carries: "group/version", or "version" for the core
// group.
const char *rg_gvk_api_version(rg_gvk_t kind);

// Names an object from its JSON (`apiVersion`, `kind`, `metadata.namespace` and `.name`), e.g.
// one that rg_lister_list returned. False (and *ref untouched) when any of them but the
// namespace is missing.
struct rg_json;
bool rg_ref_from_json(const struct rg_json *object, rg_ref_t *ref);

// ---------------------------------------------------------------------------------------------
// Manifest: what the guest asks the host to watch (the host configuration must grant it)

// At most this many secondary watches.
#define RG_MAX_SECONDARY 16

// Another kind whose changes reconcile a primary.
typedef struct rg_secondary {
  rg_gvk_t kind;
  // NULL: the primary is found through the object's `metadata.ownerReferences` (entries of the
  // primary kind). Otherwise the name of a label whose value is the primary's name, in the same
  // namespace.
  const char *label;
} rg_secondary_t;

// At most this many watches (the host takes at most 16 secondaries and watches together).
#define RG_MAX_WATCHES 16

// How an object of a watched kind leads to primary keys (the contract's `watch-mapping`), and
// what each costs the host.
typedef enum rg_mapping {
  // Through `metadata.ownerReferences` entries of the primary kind; only the kind's cache.
  RG_MAP_OWNER = 0,
  // Through `label`, whose value is the primary's name in the object's namespace; only the
  // kind's cache.
  RG_MAP_LABEL,
  // Through `namespace_label` and `label`, whose values are the primary's namespace (NULL for a
  // cluster-scoped primary) and name: children an owner reference cannot reach (in another
  // namespace, or cluster-scoped); only the kind's cache.
  RG_MAP_OWNER_LABELS,
  // To the primaries whose `field` equals the object's `value`, through an index the host keeps
  // over the primary cache: an index entry per value per primary, and no guest call.
  RG_MAP_FIELD,
  // Through the watch's `map` function: one call of the guest, in a fresh instance, per event.
  RG_MAP_FUNCTION,
} rg_mapping_t;

// What of a watched object an RG_MAP_FIELD index compares with the primary's field.
typedef enum rg_index_value {
  // Its name; a cluster-scoped object (a Namespace) matches primaries in every namespace.
  RG_INDEX_NAME = 0,
  // Its namespace: primaries in every namespace whose field names it.
  RG_INDEX_NAMESPACE,
  // Its `namespace/name` (its name alone when cluster-scoped): primaries in every namespace.
  RG_INDEX_NAMESPACED_NAME,
} rg_index_value_t;

// The keys a map function gives (rg_keys_add).
typedef struct rg_keys rg_keys_t;

// Adds a primary key (`namespace` NULL for a cluster-scoped primary) to a map function's answer;
// a key already there is not added again. The strings are copied.
void rg_keys_add(rg_keys_t *keys, const char *namespace, const char *name);

// An RG_MAP_FUNCTION watch's function: adds to `keys` the primary keys that `object` (of the
// watch's kind) affects. The host calls it on each add, update (with the new and then the old
// version) and delete of such an object, in a fresh instance in which only the lister answers.
// Return false when the object cannot be mapped, after logging why: the SDK traps, and the host
// logs and counts a failed map and drops that event's keys (the next change or resync repairs
// them). The host takes at most 1,000 keys.
typedef bool (*rg_map_fn)(const struct rg_json *object, rg_keys_t *keys);

// A kind whose changes reconcile primaries, with a mapping a secondary cannot say, or a
// namespace or label selector of its own. Zero fields are defaults, as in the manifest:
//
//     {.kind = {"", "v1", "ConfigMap"}, .mapping = RG_MAP_FIELD, .field = "spec.source"},
typedef struct rg_watch {
  // Entries whose `kind.kind` is NULL (the unset rest of the array) are skipped.
  rg_gvk_t kind;
  rg_mapping_t mapping;
  // RG_MAP_LABEL: the label naming the primary. RG_MAP_OWNER_LABELS: the label naming its name.
  const char *label;
  // RG_MAP_OWNER_LABELS: the label naming the primary's namespace; NULL: a cluster-scoped
  // primary.
  const char *namespace_label;
  // RG_MAP_FIELD: a path into the primary, fields separated by dots, `[*]` for every item of a
  // list (`spec.source`, `spec.targetNamespaces[*]`, `spec.refs[*].name`); values that are not
  // strings are not indexed.
  const char *field;
  // RG_MAP_FIELD: what of the watched object the field holds. Default: its name.
  rg_index_value_t value;
  // RG_MAP_FUNCTION: the function.
  rg_map_fn map;
  // Watch only this namespace. Default (NULL): the manifest's namespace when set, else all.
  // Ignored for cluster-scoped kinds.
  const char *namespace;
  // Take only events of objects matching this label selector. Default (NULL): all. It filters
  // events, not the host's cache of the kind, which the grant's readSelectors bound.
  const char *label_selector;
} rg_watch_t;

// At most this many computed indexes (each is a watch of its kind: the host takes at most 16
// secondaries, watches and indexes together).
#define RG_MAX_INDEXES 16

// What of a watched object is looked up among a computed index's values (the contract's
// `lookup`; as RG_MAP_FIELD's rg_index_value_t).
typedef enum rg_lookup {
  // Its name, among the primaries of its own namespace (of every namespace when it is
  // cluster-scoped).
  RG_LOOKUP_NAME = 0,
  // Its namespace, among the primaries of every namespace.
  RG_LOOKUP_NAMESPACE,
  // Its `namespace/name` (its name alone when cluster-scoped), among the primaries of every
  // namespace.
  RG_LOOKUP_NAMESPACED_NAME,
} rg_lookup_t;

// The values an index function gives (rg_values_add).
typedef struct rg_values rg_values_t;

// Adds a value to an index function's answer; NULL is ignored, and a value already there is not
// added again. The string is copied, so rg_format and rg_strndup results (and literals) do.
void rg_values_add(rg_values_t *values, const char *value);

// A computed index's function: adds to `values` the values of the index for one primary object,
// e.g. the names of the watched objects it depends on (for RG_LOOKUP_NAME). The host calls it
// when a primary is added or changes (not per event of the watched kind, not on a resync that
// changed nothing), and for every primary when a new version of the guest loads, in a fresh
// instance where every host call but log is refused: compute from the object alone. The host
// keeps at most 100 values of 1 to 317 bytes each (others are dropped and logged). Return false
// when the object cannot be indexed, after logging why: the SDK traps, and the host leaves the
// primary out of the index (logged and counted) until its next change.
typedef bool (*rg_index_fn)(const struct rg_json *primary, rg_values_t *values);

// An index whose values the guest computes from each primary (controller-runtime's `IndexField`
// with an extractor), for a dependency no field path can say: names in a comma-separated
// annotation, a value built from two fields. An event of `kind` is then a lookup among the
// values the host keeps, with no guest call. Zero fields are defaults, as in the manifest:
//
//     {.name = "configmaps", .kind = {"", "v1", "ConfigMap"}, .index = configmaps_of},
typedef struct rg_index {
  // Names the index in `index` calls, logs and metrics: 1-63 lowercase letters, digits and `-`,
  // unique among the guest's indexes. Entries whose name, kind and function are all unset (the
  // rest of the array) are skipped.
  const char *name;
  // The watched kind whose events the index maps to primaries.
  rg_gvk_t kind;
  // What of a watched object is looked up. Default: its name.
  rg_lookup_t lookup;
  // The function that computes a primary's values.
  rg_index_fn index;
  // As a watch's: this namespace only (default, NULL: the manifest's when set, else all).
  const char *namespace;
  // As a watch's: only events of objects matching this label selector (default, NULL: all).
  const char *label_selector;
} rg_index_t;

// Returned by the guest's `manifest`. `name` and `primary` are required; every other field's
// zero value is its default, so a designated initializer names only what differs:
//
//     return (rg_manifest_t){
//         .name = "network",
//         .primary = {"samplecrd.k8s.io", "v1", "Network"},
//         .secondary = {{.kind = {"", "v1", "ConfigMap"}}},  // through owner references
//         .finalizer = "samplecrd.k8s.io/bridge",
//     };
typedef struct rg_manifest {
  // Unique guest name (a DNS-1123 label): field manager, metric label, key of its grant.
  const char *name;
  // The kind whose keys this guest reconciles.
  rg_gvk_t primary;
  // Watch only this namespace. Default (NULL): all namespaces.
  const char *namespace;
  // Watch only primaries matching this label selector. Default (NULL): all.
  const char *label_selector;
  // Also reconcile a primary when one of these changes; entries whose `kind.kind` is NULL
  // (the unset rest of the array) are skipped. Default: none.
  rg_secondary_t secondary[RG_MAX_SECONDARY];
  // The host keeps this finalizer on every primary until a reconcile with `deleting` succeeds,
  // so external state is cleaned up before the object goes. Default (NULL): none.
  const char *finalizer;
  // At most this many keys reconciled at once. Default (0): the host's.
  uint32_t concurrency;
  // Re-reconcile every key this often even without changes. Default (0): never.
  uint32_t resync_seconds;
  // Reconcile a primary only when its `metadata.generation` changes (its spec, or its
  // deletion), not on status, label or annotation writes, so a guest that writes its status
  // on every reconcile does not wake itself. Creation, deletion, secondaries, requeues and
  // resync still reconcile. Default: every change.
  bool generation_changed_only;
  // Watches beyond the secondaries' owner and label mappings; entries whose `kind.kind` is NULL
  // are skipped. They are the contract's optional `watches` export, so a guest that declares any
  // is built for the world `watching-controller` (a `wit-world` file beside its .c files saying
  // so); in a component without that export the manifest traps at load, naming the fix. The
  // SDK calls `manifest` again to answer `watches` and `map`. Default: none.
  rg_watch_t watches[RG_MAX_WATCHES];
  // Indexes computed from each primary, for watches no field path can say. They are the
  // contract's optional `indexes` export, so a guest that declares any is built for the world
  // `indexing-controller` (which includes `watching-controller`); in a component without that
  // export the manifest traps at load, naming the fix. The SDK calls `manifest` again to answer
  // `indexes` and `index`. Default: none.
  rg_index_t indexes[RG_MAX_INDEXES];
} rg_manifest_t;

// ---------------------------------------------------------------------------------------------
// Request: one key to reconcile

// What `reconcile` is given. Everything in it lives until `reconcile` returns.
typedef struct rg_request {
  // The key's object; its kind is the manifest's primary kind.
  rg_ref_t ref;
  // The object has a deletion timestamp: clean up external state now.
  bool deleting;
  // 0 for the first try of this key since its last success, then 1, 2, ...
  uint32_t attempt;
  // The object's JSON text as the host passed it, NULL when the object is gone; for a guest
  // that brings its own JSON parser. Everyone else: rg_request_object.
  const char *object_json;
  size_t object_json_len;
  // Private: the parsed object, once asked for.
  const struct rg_json *parsed_;
} rg_request_t;

// The object, parsed on the first call (later calls return the same value), or NULL when it
// is gone. Cost: one pass over the text, into the arena; a guest that never asks does not pay.
const struct rg_json *rg_request_object(rg_request_t *req);

// The queue key of the request's object.
rg_key_t rg_request_key(const rg_request_t *req);

// ---------------------------------------------------------------------------------------------
// Errors of host calls

// What every host call returns: RG_OK, or the kind of the host's error (the WIT's `error`
// variant). The text is rg_last_error().
typedef enum rg_err {
  RG_OK = 0,
  // The guest's grant does not cover the call (or the object is outside the host's
  // --watch-namespace); the text names what is missing.
  RG_DENIED,
  // The object does not exist (writes only; reads give NULL instead).
  RG_NOT_FOUND,
  // The object changed since it was read (HTTP 409).
  RG_CONFLICT,
  // The request was rejected as invalid; the text starts with the field.
  RG_INVALID,
  // A dependency is unreachable or overloaded, or the guest exceeded one of its rates.
  RG_UNAVAILABLE,
  // Anything else.
  RG_OTHER,
} rg_err_t;

// The contract's name of a kind: "denied", "not-found", "conflict", "invalid",
// "unavailable", "other" (and "ok").
const char *rg_err_name(rg_err_t err);

// Whether a retry of the same call could succeed: conflict, unavailable and other.
bool rg_err_is_transient(rg_err_t err);

// The text of the most recent SDK call that failed (a host call, or rg_json_parse): what failed
// and where. "" before any failure. A later failure changes what this returns; a pointer it
// returned earlier stays valid until the call (`reconcile`) returns.
const char *rg_last_error(void);

// ---------------------------------------------------------------------------------------------
// Results of `reconcile`

typedef enum rg_result_kind {
  RG_RESULT_OK = 0,
  // Retry with per-key exponential backoff.
  RG_RESULT_TRANSIENT,
  // Do not retry until the object (or a watched secondary) changes again.
  RG_RESULT_PERMANENT,
} rg_result_kind_t;

// What `reconcile` returns; make one with the functions below.
typedef struct rg_result {
  rg_result_kind_t kind;
  // Errors: what went wrong (logged and recorded on the key by the host).
  const char *message;
  // Success: reconcile this key again after `requeue_after_ms` when `requeue` is set.
  bool requeue;
  uint64_t requeue_after_ms;
} rg_result_t;

// Done; reconcile again only when the object (or a watched secondary) changes, or at the
// manifest's resync interval.
rg_result_t rg_await_change(void);

// Done for now; reconcile this key again after `ms` milliseconds, e.g. to poll something
// external.
rg_result_t rg_requeue_after_ms(uint64_t ms);

// A failure worth retrying with backoff; printf-style message.
rg_result_t rg_transient(const char *fmt, ...) RG_PRINTF(1, 2);

// A failure that waits for the next change of the object; printf-style message.
rg_result_t rg_permanent(const char *fmt, ...) RG_PRINTF(1, 2);

// The failure of a host call, retried or not by its kind, with the message
// "<context>: <kind>: <rg_last_error()>":
//
//   host error                       result      why
//   conflict, unavailable, other     transient   the object moved on, a dependency is down, or
//                                                the cause is unknown: a retry may succeed
//   invalid, denied, not-found       permanent   the same call fails again until the object or
//                                                the grant (which reloads the guest) changes
//
//     rg_err_t err = rg_cluster_apply(body, NULL);
//     if (err != RG_OK) return rg_from_error(err, "applying ConfigMap %s", name);
//
// Handle an error yourself where the guest knows better (e.g. RG_NOT_FOUND on a delete).
rg_result_t rg_from_error(rg_err_t err, const char *context_fmt, ...) RG_PRINTF(2, 3);

// ---------------------------------------------------------------------------------------------
// Text: formatting and memory that lives until the call returns

// printf-style formatting into a new string (in the arena). The SDK's own formatter: the
// conversions d i u x X c s p % with the length modifiers hh h l ll z j t, the flags - + 0 and
// space, a width and a precision (also `*`); floating point (f e g a) is not supported and
// prints as "?". (wasi-libc's printf family would make every guest ~16 KB larger and import
// WASI's stdio.)
const char *rg_format(const char *fmt, ...) RG_PRINTF(1, 2);
const char *rg_vformat(const char *fmt, va_list args) RG_PRINTF(1, 0);

// `size` bytes (8-byte aligned) that live until the call returns; never NULL.
void *rg_alloc(size_t size);

// A copy of the first `len` bytes of `text`, NUL-terminated, living until the call returns.
const char *rg_strndup(const char *text, size_t len);

// ---------------------------------------------------------------------------------------------
// JSON: the request's object, and everything the host returns, as a navigable value
//
// Reading is NULL-tolerant: every accessor given NULL (a missing member) answers "absent", so
// lookups chain without checks in between:
//
//     int64_t generation = 0;  // the default, kept when the field is missing
//     rg_json_int(rg_json_path(object, "metadata", "generation"), &generation);
//
// Writing is text: rg_format with rg_json_quote for strings, and rg_json_serialize for values
// read elsewhere:
//
//     rg_format("{\"status\":{\"phase\":%s}}", rg_json_quote(phase))

typedef struct rg_json rg_json_t;

typedef enum rg_json_type {
  RG_JSON_ABSENT = 0,  // what rg_json_type(NULL) says
  RG_JSON_NULL,
  RG_JSON_BOOL,
  RG_JSON_NUMBER,
  RG_JSON_STRING,
  RG_JSON_ARRAY,
  RG_JSON_OBJECT,
} rg_json_type_t;

// Parses `len` bytes of `text` (a copy of them: `text` need not outlive the value). NULL when
// it is not JSON (one value, whitespace around it), with the last error RG_INVALID saying where
// (rg_last_error). Nesting deeper than 512 levels is refused. Cost: one pass and a node per
// value; strings are decoded (escapes, surrogate pairs) when first read, numbers keep their text.
const rg_json_t *rg_json_parse(const char *text, size_t len);

rg_json_type_t rg_json_type(const rg_json_t *value);

// The member `key` of an object, or NULL (not an object, or no such member). The first one
// when a key repeats.
const rg_json_t *rg_json_get(const rg_json_t *object, const char *key);

// Members of members: rg_json_path(v, "metadata", "name") is
// rg_json_get(rg_json_get(v, "metadata"), "name").
#define rg_json_path(value, ...) rg_json_path_((value), __VA_ARGS__, (const char *)NULL)
const rg_json_t *rg_json_path_(const rg_json_t *value, ...);

// The number of items of an array or members of an object; 0 for anything else.
size_t rg_json_len(const rg_json_t *value);

// Item `index` of an array (or member of an object), or NULL; walks from the first, so iterate
// with rg_json_first/rg_json_next instead:
//
//     for (const rg_json_t *item = rg_json_first(list); item; item = rg_json_next(item)) ...
const rg_json_t *rg_json_at(const rg_json_t *container, size_t index);
const rg_json_t *rg_json_first(const rg_json_t *container);
const rg_json_t *rg_json_next(const rg_json_t *item);

// The name of an object's member (one that rg_json_first/rg_json_next/rg_json_get gave), or
// NULL for an array's item.
const char *rg_json_key(const rg_json_t *member);

// A string's decoded text, or NULL when the value is not a string.
const char *rg_json_string(const rg_json_t *value);

// A string's length in bytes (which counts a `\u0000`), 0 when the value is not a string.
size_t rg_json_string_len(const rg_json_t *value);

// The value into *out, returning true, when it is a boolean; otherwise false and *out is left
// as it was (so it can hold a default).
bool rg_json_bool(const rg_json_t *value, bool *out);

// The value into *out when it is a number without fraction or exponent that fits; otherwise
// false, *out left as it was.
bool rg_json_int(const rg_json_t *value, int64_t *out);

// Whether the value is a number without fraction or exponent (of any size).
bool rg_json_is_integer(const rg_json_t *value);

// A number's text as the JSON spelt it (e.g. "1.5e3"), or NULL when the value is not a number.
const char *rg_json_number_text(const rg_json_t *value);

// The value as compact JSON text (members in their order, strings re-escaped, numbers as
// spelt), or "null" for NULL.
const char *rg_json_serialize(const rg_json_t *value);

// `text` as a JSON string literal, quotes included: "\"a \\\"b\\\"\"" for a "b".
const char *rg_json_quote(const char *text);
const char *rg_json_quote_n(const char *text, size_t len);

// ---------------------------------------------------------------------------------------------
// Log: lines in the host's log stream, labelled there with guest, key and attempt

typedef enum rg_level {
  RG_LOG_TRACE,
  RG_LOG_DEBUG,
  RG_LOG_INFO,
  RG_LOG_WARN,
  RG_LOG_ERROR,
} rg_level_t;

// One line at `level`, printf-style (see rg_format). The host escapes it, cuts it to 4 KiB,
// and drops lines beyond the guest's log rate or below its level. One host call per line.
void rg_log(rg_level_t level, const char *fmt, ...) RG_PRINTF(2, 3);

#define rg_trace(...) rg_log(RG_LOG_TRACE, __VA_ARGS__)
#define rg_debug(...) rg_log(RG_LOG_DEBUG, __VA_ARGS__)
#define rg_info(...) rg_log(RG_LOG_INFO, __VA_ARGS__)
#define rg_warn(...) rg_log(RG_LOG_WARN, __VA_ARGS__)
#define rg_error(...) rg_log(RG_LOG_ERROR, __VA_ARGS__)

// ---------------------------------------------------------------------------------------------
// Lister: reads from the host's informer caches, never from the API server
//
// Each call copies the object(s) across the component boundary and parses them: cheap for one
// object, proportional to the result for a list. Only kinds the grant lets the guest read;
// others fail with RG_DENIED.

// The cached object into *object, NULL when it does not exist (or is not cached yet).
rg_err_t rg_lister_get(const rg_ref_t *ref, const rg_json_t **object);

// Cached objects of `kind` into *objects, a JSON array: in `namespace` (NULL: all) and matching
// `label_selector` (NULL: all; Kubernetes syntax, `app=web,tier!=db,env in (a,b),!legacy`; a
// bad one is RG_INVALID).
rg_err_t rg_lister_list(rg_gvk_t kind, const char *namespace, const char *label_selector,
                        const rg_json_t **objects);

// ---------------------------------------------------------------------------------------------
// Cluster: writes to the API server, with the guest's name as field manager
//
// Each call is a round trip to the API server. After a write the host's cache shows the
// returned object at once, so a following rg_lister_get reads the guest's own write. Pass NULL
// for `returned` when you do not need the object back: it is then not parsed.

// JSON merge patch of the status subresource; `patch` is the whole patch, e.g.
// `{"status":{"phase":"Ready"}}` (only `status`, and `metadata.resourceVersion` as a
// precondition). Fields absent from it are left alone, `null` removes one, and lists (such as
// `conditions`) are replaced whole. *returned: the object as the API server returned it (only
// its identity when the grant does not let the guest read its kind).
rg_err_t rg_cluster_patch_status(const rg_ref_t *ref, const char *patch,
                                 const rg_json_t **returned);

// Server-side apply (`apiVersion`, `kind`, `metadata.name` required) with the guest as field
// manager, forced: the guest takes every field it sets, from any other manager. It owns the
// fields it sends and nothing else, so send an object of the guest's own whole; on an object
// others manage too (a Deployment kubectl, Helm or an HPA writes), send only the fields the
// guest manages, or use rg_cluster_apply_with without `force`. *returned: the applied object,
// filtered as above.
rg_err_t rg_cluster_apply(const char *object, const rg_json_t **returned);

// How rg_cluster_apply_with applies; zero fields are the defaults.
typedef struct rg_apply_options {
  // Take fields another field manager owns. Without it, a field `object` sets that another
  // manager owns is RG_CONFLICT, whose text (the API server's) names the field and the manager,
  // and nothing is written.
  bool force;
} rg_apply_options_t;

// Server-side apply of the fields the guest manages, as its own field manager: `object` carries
// `apiVersion`, `kind`, `metadata.name` (and `namespace`) and only the fields the guest sets,
// e.g. one annotation of a Deployment's Pod template. Every other field stays its owner's; a
// field the guest applied before and leaves out now is removed. Errors as for rg_cluster_apply,
// and RG_CONFLICT as rg_apply_options_t says (transient with rg_from_error: retried with backoff
// until the other manager lets go). *returned: as for rg_cluster_apply.
//
//     err = rg_cluster_apply_with(fields, (rg_apply_options_t){0}, NULL);
rg_err_t rg_cluster_apply_with(const char *object, rg_apply_options_t options,
                               const rg_json_t **returned);

// Deletes an object; *existed (may be NULL) false when it was already gone.
rg_err_t rg_cluster_delete(const rg_ref_t *ref, bool *existed);

// ---------------------------------------------------------------------------------------------
// Event: Kubernetes events about objects, for the humans running `kubectl describe`
//
// The host aggregates repeats of the same (object, type, reason), so recording one on every
// reconcile costs little.

typedef enum rg_event_type {
  RG_EVENT_NORMAL,
  RG_EVENT_WARNING,
} rg_event_type_t;

// Records a Normal event, best effort: a failure is logged at warn level and not returned.
// `reason` is UpperCamelCase (`Synced`); the message is printf-style.
void rg_event_normal(const rg_ref_t *regarding, const char *reason, const char *fmt, ...)
    RG_PRINTF(3, 4);

// Records a Warning event (`BackendFailed`), best effort like rg_event_normal.
void rg_event_warning(const rg_ref_t *regarding, const char *reason, const char *fmt, ...)
    RG_PRINTF(3, 4);

// Records an event and reports whether the host took it (RG_DENIED when the guest may not read
// `regarding`, RG_UNAVAILABLE beyond its event rate).
rg_err_t rg_event_record(const rg_ref_t *regarding, rg_event_type_t type, const char *reason,
                         const char *message);

// ---------------------------------------------------------------------------------------------
// Queue: the guest's own work queue (keys of its primary kind)

// Adds a key now. Duplicate adds collapse, and the host never runs two reconciles of one key
// at once.
rg_err_t rg_queue_enqueue(rg_key_t key);

// Adds a key, not before `after_ms` milliseconds (at most 24 h).
rg_err_t rg_queue_enqueue_after_ms(rg_key_t key, uint64_t after_ms);

// ---------------------------------------------------------------------------------------------
// Conditions: `status.conditions` in the `metav1.Condition` shape, kept the way `kubectl wait`
// and humans expect: one entry per type, `lastTransitionTime` moving only when the status flips.
//
//     rg_conditions_t conditions = rg_conditions_read(object);
//     rg_condition_t ready = rg_condition("Ready", true, "Synced", "bridge is up");
//     ready.observed_generation = generation;
//     if (rg_conditions_set(&conditions, ready))
//       patch = rg_format("{\"status\":{\"conditions\":%s}}", rg_conditions_json(&conditions));

typedef struct rg_condition {
  const char *type;
  // "True", "False" or "Unknown".
  const char *status;
  // UpperCamelCase, e.g. `Synced`.
  const char *reason;
  const char *message;
  // The generation the condition was computed from; 0: not recorded (left out of the JSON, as
  // the API server leaves it out).
  int64_t observed_generation;
  // RFC 3339 in whole seconds, e.g. "2026-01-02T03:04:05Z".
  const char *last_transition_time;
} rg_condition_t;

// A list of conditions; its strings are borrowed (literals, or SDK strings: all live until the
// call returns).
typedef struct rg_conditions {
  rg_condition_t *items;
  size_t len;
  size_t cap_;  // private
} rg_conditions_t;

// The conditions in `object`'s `status.conditions` (none when it has none).
rg_conditions_t rg_conditions_read(const rg_json_t *object);

// A condition stamped with rg_now(); set observed_generation on the result if you track it.
rg_condition_t rg_condition(const char *type, bool status, const char *reason,
                            const char *message);

// The condition of `type`, or NULL.
const rg_condition_t *rg_conditions_find(const rg_conditions_t *conditions, const char *type);

// Whether the condition of `type` is present with status "True".
bool rg_conditions_is_true(const rg_conditions_t *conditions, const char *type);

// Adds `condition`, or updates the one of the same type in place, like apimachinery's
// `meta.SetStatusCondition`: lastTransitionTime is taken from `condition` only when the status
// changes; reason, message and observed generation always follow it. Returns whether anything
// changed, so a guest can skip a status write (and an event) when nothing did.
bool rg_conditions_set(rg_conditions_t *conditions, rg_condition_t condition);

// The list as a JSON array, for a status patch (merge patches replace lists whole).
const char *rg_conditions_json(const rg_conditions_t *conditions);

// Now, as RFC 3339 in whole seconds (as the API server stores it, so a condition read back
// compares equal to the one written). Reads the clock: the one WASI import the SDK may bring
// (wasi:clocks, through the preview1 adapter, which adds its stderr and ~7 KB).
const char *rg_now(void);

// ---------------------------------------------------------------------------------------------
// Implemented by the guest

// What the guest watches; called once, when the host loads the component.
rg_manifest_t manifest(void);

// Drives the object named by `req->ref` towards its spec.
rg_result_t reconcile(rg_request_t *req);

#endif
