// Module resolution for the repository's guests in the SDK's tests (registered by setup.js): a
// guest's `./reconciler-guest/index.js` is this SDK, as a build puts it beside the guest. The
// component imports are the public fake host's (../testing/hooks.js).
const sdk = new URL("../reconciler-guest/", import.meta.url).href;

export async function resolve(specifier, context, next) {
  if (specifier === "./reconciler-guest/index.js" && !context.parentURL?.startsWith(sdk)) {
    return { url: new URL("index.js", sdk).href, shortCircuit: true };
  }
  return next(specifier, context);
}
