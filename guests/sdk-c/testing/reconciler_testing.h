// A fake host for a C guest's native unit tests: link rg_fake_host.c and rg_fake_selector.c (this
// directory) into a test program with the guest's .c files and the SDK, and the guest's `map`,
// `index` and `reconcile` run natively, as the host would call them, against objects the test
// loads. Never part of a component: the build recipe (guests/lib.sh) compiles the SDK's own
// directory only, not this one.
//
//     #include "reconciler_testing.h"
//
//     rg_fake_load("[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":"
//                  "{\"namespace\":\"demo\",\"name\":\"a\"},\"data\":{\"v\":\"1\"}}]");
//     const char *keys = rg_fake_map((rg_gvk_t){"", "v1", "ConfigMap"}, config_map_json);
//     // keys: "demo/w1\ndemo/w2\n"
//     const char *result = rg_fake_reconcile((rg_key_t){"demo", "w1"});
//     // result: "ok"; rg_fake_writes(): "cluster.patch-status ... {\"status\":...}\n"
//
// What the fake answers, kept simple on purpose (the offline runner, `reconciler-host reconcile`
// and `test`, runs the built component under its grant and is the full model):
//
//   reads    lister.get finds a loaded object by kind (group, version and kind), namespace and
//            name; lister.list takes the loaded objects of a kind in a namespace (NULL: all)
//            matching a label selector in the host's syntax and with its meaning (`=`, `==`,
//            `!=`, `key`, `!key`, `in (...)`, `notin (...)`; `!=` and `notin` match an object
//            without the label; a bad selector is RG_INVALID with the host's text), sorted by
//            namespace, then name, as the host's cache returns them.
//   writes   are recorded, never sent anywhere, and change the loaded objects so that a later
//            read sees them: patch-status merges the patch's `status` into the object (an RFC 7386
//            merge patch; RG_NOT_FOUND when no such object is loaded); apply and apply-with merge
//            the object into the loaded one, or add it (RG_INVALID without apiVersion, kind and
//            metadata.name); delete removes it. Each answers with the object as it then is.
//            record-event and enqueue are recorded only.
//   logs     are recorded as calls too (and echoed to a file descriptor: rg_fake_log_fd).
//
// Not modelled: grants (every kind is readable, every write allowed), field ownership (apply-with
// without force never conflicts), resourceVersion and generation, what the host refuses inside
// `map` (writes) and `index` (every call but log), the network backend.
//
// Every string the fake returns is its own, valid until rg_fake_reset; strings passed in are
// copied.
#ifndef RECONCILER_TESTING_H
#define RECONCILER_TESTING_H

#include "reconciler.h"

// ---------------------------------------------------------------------------------------------
// Objects

// Loads objects from JSON text: one object, or an array of them, each with `apiVersion`, `kind`
// and `metadata.name` (and `metadata.namespace` when namespaced). An object with the kind,
// namespace and name of one loaded before replaces it. Text that is not such JSON is a broken
// test: the fake says why on stderr and aborts.
void rg_fake_load(const char *json);

// The loaded object `ref` names as JSON text (after the writes so far), or NULL.
const char *rg_fake_get(const rg_ref_t *ref);

// Forgets the objects, the calls and the scripted answers, and frees every string the fake
// returned. Call it between tests.
void rg_fake_reset(void);

// ---------------------------------------------------------------------------------------------
// Driving the guest, as the host calls it

// Runs the guest's `reconcile` for `key`, of the manifest's primary kind, as the host would: the
// request carries the loaded object (none when there is none), `deleting` when it has a
// `metadata.deletionTimestamp`, and attempt 0. Says what it returned: "ok", "requeue after N ms",
// "transient: MESSAGE" or "permanent: MESSAGE".
const char *rg_fake_reconcile(rg_key_t key);

// Runs the `map` export for an object of `kind` (its JSON text): the keys the guest's map
// functions for the kind added, one line each in their order, "namespace/name\n" ("name\n" for a
// cluster-scoped key); "" for none. A map function that returns false traps, in a test too: the
// process aborts (run it in a child process to test that, as guests/sdk-c/tests does). Only in a
// test built for a world with `watches` (watching-controller, indexing-controller).
const char *rg_fake_map(rg_gvk_t kind, const char *object_json);

// Runs the `index` export: the values index `name` computes for a primary (its JSON text), one
// line each in their order; "" for none. An index function that returns false traps, as above.
// Only in a test built for a world with `indexes` (indexing-controller).
const char *rg_fake_index(const char *name, const char *primary_json);

// ---------------------------------------------------------------------------------------------
// What the guest did: one line per call, in order, each ending in "\n"; "" for none
//
//   lister.get KIND NAMESPACE/NAME         KIND is group/version/Kind (version/Kind for the core
//   lister.list KIND namespace=NS|(all) selector=SELECTOR|(all)     group); NAME alone when the
//   cluster.patch-status KIND NAMESPACE/NAME PATCH                  object is cluster-scoped
//   cluster.apply OBJECT
//   cluster.apply-with force=true|false OBJECT
//   cluster.delete KIND NAMESPACE/NAME
//   cluster.record-event Normal|Warning REASON KIND NAMESPACE/NAME: MESSAGE
//   queue.enqueue NAMESPACE/NAME after=MS|none
//   log trace|debug|info|warn|error MESSAGE
//
// Texts (patches, objects, messages) as the guest sent them.

// Every call since rg_fake_reset.
const char *rg_fake_calls(void);

// The writes alone: cluster.* and queue.* calls.
const char *rg_fake_writes(void);

// The log lines alone.
const char *rg_fake_logs(void);

// Also writes every log line, as recorded, to `fd` (2: the test's stderr; a pipe: what a child
// process logged before it trapped); -1 (the default) stops that.
void rg_fake_log_fd(int fd);

// ---------------------------------------------------------------------------------------------
// Scripted answers, taken in the order they were given by the first call they fit

// The next call named `call` ("lister.get", "cluster.apply", ... as above; NULL: whichever call
// comes next, log excepted) fails with `kind` (RG_DENIED to RG_OTHER) and `text`, changing
// nothing. Another name, or RG_OK, is a broken test: the fake says so on stderr and aborts.
void rg_fake_fail_next(const char *call, rg_err_t kind, const char *text);

// The next call named `call` answers `text`, exactly, changing nothing: the object that
// "lister.get" finds (NULL: none), or the object "cluster.patch-status", "cluster.apply" or
// "cluster.apply-with" return (e.g. with the resourceVersion a server would set, or text that
// is not JSON, to see how the guest takes it).
void rg_fake_answer_next(const char *call, const char *text);

#endif
