// Module resolution for the native tests (registered by setup.js):
// - every `reconciler:api/<interface>@0.1.0`, and `wasi:cli/environment@0.2.12` (env.js), is the
//   one fake host, fake-host.js;
// - a guest's `./reconciler-guest/index.js` is this SDK, as a build puts it beside the guest.
const fakeHost = new URL("./fake-host.js", import.meta.url).href;
const sdk = new URL("../reconciler-guest/", import.meta.url).href;

export async function resolve(specifier, context, next) {
  if (/^reconciler:api\/[a-z-]+@0\.1\.0$/.test(specifier) || specifier === "wasi:cli/environment@0.2.12") {
    return { url: fakeHost, shortCircuit: true };
  }
  if (specifier === "./reconciler-guest/index.js" && !context.parentURL?.startsWith(sdk)) {
    return { url: new URL("index.js", sdk).href, shortCircuit: true };
  }
  return next(specifier, context);
}
