// A fake reconciler-host for a guest's unit tests under node's test runner (types: index.d.ts
// beside this file). Outside a component the guest's imports (`reconciler:api/*`,
// `wasi:cli/environment`) do not exist; register.js makes node answer them from this fake and
// lets a test import it as `reconciler-guest/testing`:
//
//   node --import ./<this directory>/register.js --test
//
//   import { host } from "reconciler-guest/testing";
//   import { refOf } from "../reconciler-guest/index.js";
//   import { reconciler } from "../app.js";
//
//   beforeEach(() => host.reset());
//
//   test("greets", () => {
//     host.load(widget);                                   // the cluster the guest sees
//     reconciler.reconcile(host.request(widget));          // the contract's request for it
//     assert.equal(host.get(refOf(widget)).status.greeting, "hello, world");
//     assert.deepEqual(host.writes.map((w) => w.op), ["patch-status", "record-event"]);
//   });
//
// Reads answer from the objects loaded; writes are recorded, never sent, and change the
// objects as the offline runner does (host.js says how far that goes). Nothing here is part of
// a component: the build copies the SDK (reconciler-guest/) and the guest's own modules only.

import * as state from "./host.js";

/** The fake host; one per process, as the imports it answers are. */
export const host = Object.freeze({
  /**
   * Adds objects to the cluster the guest sees, replacing any of the same kind, namespace and
   * name: plain objects, their JSON text (an object, an array of them, or a `kind: List`), or
   * arrays of either. Each needs `apiVersion`, `kind` and `metadata.name`.
   */
  load(...objects) {
    const each = (item) => {
      if (typeof item === "string") return each(JSON.parse(item));
      if (Array.isArray(item)) return item.forEach(each);
      if (typeof item?.kind === "string" && item.kind.endsWith("List") && Array.isArray(item.items)) {
        return item.items.forEach(each);
      }
      state.hold(item);
    };
    objects.forEach(each);
  },

  /** The object `ref` (`{kind, namespace, name}`) names, as it is now, or null. */
  get(ref) {
    return state.held(ref);
  },

  /**
   * The objects of `kind` in `namespace` (default: all) matching `labelSelector` (a string in
   * the host's syntax, or `{label: value}`), sorted by namespace, then name, as `lister.list`
   * sees them. An invalid selector throws what the host answers: an `invalid` error.
   */
  list(kind, { namespace, labelSelector } = {}) {
    const text = labelSelector == null || typeof labelSelector === "string" ? labelSelector : labelsSelector(labelSelector);
    return state.heldList(kind, namespace ?? undefined, text ?? undefined);
  },

  /**
   * The contract's request for the object `target` names (a reference, or an object whose
   * `apiVersion`, `kind` and `metadata.name` name it), as the host would hand it to `reconcile`:
   * the object held now (null when none is), `deleting` from its `deletionTimestamp`.
   */
  request(target, { attempt = 0 } = {}) {
    const ref =
      typeof target?.apiVersion === "string"
        ? state.refOfObject(target)
        : target?.kind && typeof target.name === "string"
          ? { kind: { ...target.kind }, namespace: target.namespace || null, name: target.name }
          : null;
    if (ref === null) throw new TypeError("host.request: expected an object reference {kind, namespace, name} or an object");
    const object = state.held(ref);
    return {
      ref,
      object: object === null ? null : JSON.stringify(object),
      deleting: Boolean(object?.metadata?.deletionTimestamp),
      attempt,
    };
  },

  /**
   * Every write the guest made, in order, whatever it was answered: `{op: "patch-status", ref,
   * patch}`, `{op: "apply", object}`, `{op: "apply-with", object, force}`, `{op: "delete",
   * ref}`, `{op: "record-event", event: {regarding, eventType, reason, message}}`, `{op:
   * "enqueue", key, afterMs}`; patches and objects parsed.
   */
  writes: state.writes,

  /** Every line the guest logged: `{level, message}`. */
  logs: state.logs,

  /** Every import call, reads too: `{fn, args}` with the arguments as they crossed (JSON as text). */
  calls: state.calls,

  /** The arguments of each call of import `fn` (`"patchStatus"`, `"get"`, ...). */
  callsOf(fn) {
    return state.calls.filter((c) => c.fn === fn).map((c) => c.args);
  },

  /**
   * Answers every later call of import `fn` with `handler(...args)` instead of the fake server:
   * what the import returns (JSON as text), or a throw of `hostError(kind, text)` to refuse it.
   * The imports: `get`, `list`, `patchStatus`, `apply`, `applyWith`, `delete`, `recordEvent`,
   * `enqueue`, `log`, `getEnvironment`.
   */
  answer(fn, handler) {
    state.answer(fn, handler);
  },

  /** The environment `getenv` reads, as a grant's `env` sets it: `{NAME: "value"}`. */
  setEnv(variables) {
    state.setEnvironment(variables);
  },

  /** Forgets the objects, the records, the answers and the environment. */
  reset() {
    state.reset();
  },
});

/**
 * What an import throws when the host refuses a call (an `Error` whose `payload` is the
 * contract's variant), for `host.answer`: `kind` is `denied`, `not-found`, `conflict`,
 * `invalid`, `unavailable` or `other`.
 */
export const hostError = state.hostError;

function labelsSelector(labels) {
  return Object.entries(labels)
    .map(([label, value]) => `${label}=${value}`)
    .join(",");
}
