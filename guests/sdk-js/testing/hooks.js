// Module resolution for a guest's native tests (registered by register.js): every
// `reconciler:api/<interface>@0.1.0` and `wasi:cli/environment@0.2.12` is the fake host's
// bindings.js, and `reconciler-guest/testing` is this directory's index.js.
const bindings = new URL("./bindings.js", import.meta.url).href;
const testing = new URL("./index.js", import.meta.url).href;

export async function resolve(specifier, context, next) {
  if (/^reconciler:api\/[a-z-]+@0\.1\.0$/.test(specifier) || specifier === "wasi:cli/environment@0.2.12") {
    return { url: bindings, shortCircuit: true };
  }
  if (specifier === "reconciler-guest/testing") return { url: testing, shortCircuit: true };
  return next(specifier, context);
}
