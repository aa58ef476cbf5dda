// A reconciler written in JavaScript: the greeter (the same behaviour as
// guests/python/greeter/app.py, pinned by the same fixtures host/tests/fixtures/greeter-*),
// made a component by jco's QuickJS backend (guests/js/build.sh).
//
// Manifest name `greeter`, primary `test.reconciler.dev/v1 Widget`, reconciled only when its
// generation changes. Each reconcile writes `status.observedGeneration` and `status.greeting`
// ("hello, <spec.message or name>") and records a Normal `Greeted` event. A Widget whose
// `spec.message` is not a string is a permanent error; a failed status write is transient.
//
// The contract's shapes in JavaScript: records are objects with camelCase fields, `option` is
// the value or `null`/`undefined` (the QuickJS backend hands `none` over as `null`, and takes
// either), enums are their names as strings, variants are `{tag, val}`, u64 is
// a BigInt. A `result` import returns its `ok` value and throws its `err`; `reconcile` returns
// its `ok` value and throws its `err`.

import { patchStatus, recordEvent } from "reconciler:api/cluster@0.1.0";
import { log } from "reconciler:api/log@0.1.0";

// The names Python gives JSON's types, so that every language's greeter fails in the same words.
function typeName(value) {
  if (value === null) return "NoneType";
  if (Array.isArray(value)) return "list";
  switch (typeof value) {
    case "boolean":
      return "bool";
    case "number":
      return Number.isInteger(value) ? "int" : "float";
    case "object":
      return "dict";
    default:
      return typeof value;
  }
}

// An import's error, `{tag, val}`, however the toolchain wraps what it throws.
function describe(error) {
  const variant = error && error.payload !== undefined ? error.payload : error;
  return variant && variant.tag !== undefined ? `${variant.tag}: ${variant.val}` : String(variant);
}

export const reconciler = {
  manifest() {
    return {
      name: "greeter",
      primary: { group: "test.reconciler.dev", version: "v1", kind: "Widget" },
      namespace: undefined,
      labelSelector: undefined,
      secondary: [],
      finalizer: undefined,
      concurrency: 0,
      resyncSeconds: 0,
      generationChangedOnly: true,
    };
  },

  reconcile(request) {
    if (request.object == null) {
      log("info", "gone");
      return { requeueAfterMs: undefined };
    }
    const widget = JSON.parse(request.object);
    const metadata = widget.metadata ?? {};
    const spec = widget.spec ?? {};
    const message = "message" in spec ? spec.message : (metadata.name ?? "");
    if (typeof message !== "string") {
      throw { tag: "permanent", val: `spec.message must be a string, not ${typeName(message)}` };
    }
    const greeting = `hello, ${message}`;
    const patch = { status: { observedGeneration: metadata.generation ?? 0, greeting } };
    try {
      patchStatus(request.ref, JSON.stringify(patch));
    } catch (error) {
      throw { tag: "transient", val: `status write failed: ${describe(error)}` };
    }
    try {
      recordEvent({ regarding: request.ref, eventType: "normal", reason: "Greeted", message: greeting });
    } catch (error) {
      // An event is a courtesy: a refused one (the guest's event rate) does not fail the reconcile.
      log("warn", `event not recorded: ${describe(error)}`);
    }
    return { requeueAfterMs: undefined };
  },
};
