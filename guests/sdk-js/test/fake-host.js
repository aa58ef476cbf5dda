// A fake of the host's imports, as jco's QuickJS bindings present them to a guest: each call is
// recorded in `calls` ({fn, args}) and answered by the handler a test set with `answer`, or by
// the default below. A handler throws `hostError(kind, text)` to fail a call the way the
// bindings do (an Error whose `payload` is the contract's variant).

/** Every call made since the last `reset()`. */
export const calls = [];
const handlers = new Map();

/** Answers every later call of `fn` (e.g. "patchStatus") with `handler(...args)`. */
export function answer(fn, handler) {
  handlers.set(fn, handler);
}

/** Forgets the calls and the handlers. */
export function reset() {
  calls.length = 0;
  handlers.clear();
}

/** What the bindings throw for the contract's `error` variant. */
export function hostError(kind, text) {
  return Object.assign(new Error("[object Object] (see error.payload)"), { payload: { tag: kind, val: text } });
}

/** The calls of `fn`, their arguments only. */
export function callsOf(fn) {
  return calls.filter((c) => c.fn === fn).map((c) => c.args);
}

function call(fn, args, fallback) {
  calls.push({ fn, args });
  const handler = handlers.get(fn);
  return handler ? handler(...args) : fallback(...args);
}

// reconciler:api/lister
export const get = (...args) => call("get", args, () => null);
export const list = (...args) => call("list", args, () => []);
// reconciler:api/cluster
export const patchStatus = (...args) => call("patchStatus", args, (ref, patch) => patch);
export const apply = (...args) => call("apply", args, (object) => object);
export const applyWith = (...args) => call("applyWith", args, (object) => object);
const remove = (...args) => call("delete", args, () => true);
export { remove as delete };
export const recordEvent = (...args) => call("recordEvent", args, () => undefined);
// reconciler:api/queue
export const enqueue = (...args) => call("enqueue", args, () => undefined);
// reconciler:api/log
export const log = (...args) => call("log", args, () => undefined);
// wasi:cli/environment: none unless a test answers it
export const getEnvironment = (...args) => call("getEnvironment", args, () => []);
