// The JavaScript SDK for reconciler-host guests (types: index.d.ts beside this file).
//
// A guest is one `defineReconciler` call; start here. Export what it returns as `reconciler`:
//
//   import { defineReconciler, gvk, log } from "./reconciler-guest/index.js";
//
//   export const reconciler = defineReconciler({
//     manifest: { name: "hello", primary: gvk("example.com", "v1", "Hello"), concurrency: 2 },
//     reconcile(request) {
//       log.info("reconciling %s", request.name);
//     },
//   });
//
// Everything else is à la carte, one module per host interface of `wit/reconciler.wit` (the
// contract), imported from here only:
//
//   lister      cache reads, parsed objects
//   cluster     status merge patches, server-side apply, deletes
//   events      Kubernetes events (best effort)
//   queue       enqueueing other keys of the guest's own kind
//   log         logging into the host's stream, printf-style
//   conditions  `metav1.Condition` bookkeeping with a stable `lastTransitionTime`
//   getenv      the environment the guest's grant sets (`env`)
//
// Watches beyond the manifest's owner and label mappings (field indexes, owner labels, map
// functions, a namespace and selector per kind) are the optional `watches` export, made by
// `defineWatches` for a guest whose world is `watching-controller`. Indexes whose values the
// guest computes from each primary are the optional `indexes` export, made by `defineIndexes`
// for a guest whose world is `indexing-controller`.
//
// Outbound HTTP is the standard `fetch` in an `async reconcile`, for a guest whose world is
// `http-controller` (error.js says how its failures are reported).
//
// Host calls throw a HostError (its `kind` is the contract's error case); thrown out of
// `reconcile` it becomes a transient or permanent failure (the mapping is in error.js).
// `transient()` and `permanent()` make the reconcile errors a guest throws itself. Any other
// exception is a bug: the SDK logs it at error level and the instance traps.
//
// The build (jco's QuickJS backend; StarlingMonkey for `http-controller`) loads these modules
// once, when it snapshots the guest, so splitting the SDK into files costs nothing per
// reconcile. Each reconcile runs in a fresh instance: keep no state between calls.

import { marking, reconcileErrorVariant } from "./error.js";
import { error as logError } from "./log.js";
import { manifest } from "./manifest.js";
import { Request } from "./object.js";
import { milliseconds } from "./queue.js";

export * as cluster from "./cluster.js";
export * as conditions from "./conditions.js";
export { getenv } from "./env.js";
export { HOST_ERROR_KINDS, HostError, ReconcileError, hostCall, permanent, transient } from "./error.js";
export * as events from "./event.js";
export * as lister from "./lister.js";
export * as log from "./log.js";
export { IndexValue, Mapping, defineIndexes, defineWatches, manifest } from "./manifest.js";
export { Request, apiVersionOf, describe, gvk, gvkFromApiVersion, keyOf, objectRef, refOf, selector } from "./object.js";
export * as queue from "./queue.js";

if (typeof globalThis.fetch === "function") globalThis.fetch = marking(globalThis.fetch);

/** What to do after a successful reconcile (the contract's `action`). */
export const Action = Object.freeze({
  /**
   * Done; reconcile again only when the object (or a watched secondary) changes, or at the
   * manifest's resync interval. Returning nothing from `reconcile` means the same.
   */
  awaitChange() {
    return { requeueAfterMs: undefined };
  },
  /** Done for now; reconcile this key again after `ms` milliseconds, e.g. to poll something. */
  requeueAfter(ms) {
    return { requeueAfterMs: milliseconds(ms) };
  },
});

/**
 * The component's `reconciler` export from a guest: `manifest` (the options of `manifest()`,
 * or a function returning them) and `reconcile(request)`, which receives a `Request` and
 * returns nothing or an `Action`, or throws a ReconcileError (or a HostError).
 *
 * The host calls `manifest` once when it loads the component and `reconcile` for every key,
 * each call in a fresh instance. `reconcile` may be `async` (return a Promise) where the engine
 * runs an event loop to settle it: the StarlingMonkey build of an `http-controller` guest. The
 * QuickJS build has none, and there a Promise is refused as a bug.
 */
export function defineReconciler(guest) {
  if (typeof guest?.reconcile !== "function") {
    throw new TypeError("defineReconciler: expected {manifest, reconcile(request)}");
  }
  return {
    manifest() {
      return manifest(typeof guest.manifest === "function" ? guest.manifest() : guest.manifest);
    },

    reconcile(request) {
      let action;
      try {
        action = guest.reconcile(new Request(request));
      } catch (thrown) {
        throw failure(thrown);
      }
      if (typeof action?.then !== "function") return finish(action);
      // Timers need an event loop: StarlingMonkey (and node, in the SDK's tests) run one, the
      // QuickJS build has neither.
      if (typeof globalThis.setTimeout !== "function") {
        throw bug(
          new TypeError(
            "reconcile returned a Promise, but this build (QuickJS) has no event loop to settle it: " +
              "make reconcile synchronous, or build the guest for the world `http-controller` " +
              "(a `wit-world` file), whose StarlingMonkey build awaits it",
          ),
        );
      }
      return action.then(finish, (thrown) => {
        throw failure(thrown);
      });
    },
  };
}

function finish(action) {
  if (action?.requeueAfterMs == null) return Action.awaitChange();
  return Action.requeueAfter(action.requeueAfterMs);
}

// What `reconcile` threw (or its Promise rejected with), as the bindings take it: a reconcile
// error (a failed fetch among them) as the contract's variant, which they turn into the `err`
// result; anything else as it was, a bug.
function failure(thrown) {
  return reconcileErrorVariant(thrown) ?? bug(thrown);
}

// An exception that is not a reconcile error is a bug, like a panic in Rust: logged at error
// level (the host puts that line into the reconcile's error) and thrown on, which traps.
function bug(thrown) {
  const what = thrown instanceof Error ? `${thrown.name}: ${thrown.message}` : String(thrown);
  const stack = thrown instanceof Error && thrown.stack ? `\n${thrown.stack}` : "";
  logError(`guest threw ${what}${stack}`);
  return thrown;
}
