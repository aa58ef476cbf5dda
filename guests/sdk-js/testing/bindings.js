// The component imports a guest binds to, as jco's QuickJS bindings present them, answered by
// the fake host (host.js). hooks.js resolves every `reconciler:api/<interface>@0.1.0` and
// `wasi:cli/environment@0.2.12` to this one module, which exports the functions of them all.

import { call } from "./host.js";

// reconciler:api/lister
export const get = (...args) => call("get", args);
export const list = (...args) => call("list", args);
// reconciler:api/cluster
export const patchStatus = (...args) => call("patchStatus", args);
export const apply = (...args) => call("apply", args);
export const applyWith = (...args) => call("applyWith", args);
const remove = (...args) => call("delete", args);
export { remove as delete };
export const recordEvent = (...args) => call("recordEvent", args);
// reconciler:api/queue
export const enqueue = (...args) => call("enqueue", args);
// reconciler:api/log
export const log = (...args) => call("log", args);
// wasi:cli/environment
export const getEnvironment = (...args) => call("getEnvironment", args);
