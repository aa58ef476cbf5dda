// A reconciler written in JavaScript: the greeter (the same behaviour as
// guests/python/greeter/app.py, pinned by the same fixtures host/tests/fixtures/greeter-*), on
// the SDK in ./reconciler-guest/ (guests/sdk-js/reconciler-guest in the repository, which the
// build puts beside this file), made a component by jco's QuickJS backend (guests/js/build.sh).
//
// Manifest name `greeter`, primary `test.reconciler.dev/v1 Widget`, reconciled only when its
// generation changes. Each reconcile writes `status.observedGeneration` and `status.greeting`
// ("<GREETING or hello>, <spec.message or name>", GREETING from the grant's `env`) and records a
// Normal `Greeted` event. A Widget whose `spec.message` is not a string is a permanent error; a
// failed status write is transient.

import { cluster, defineReconciler, events, getenv, gvk, log, permanent, transient } from "./reconciler-guest/index.js";

// The names Python gives JSON's types, so that every language's greeter fails in the same words.
/** @param {unknown} value */
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

export const reconciler = defineReconciler({
  manifest: {
    name: "greeter",
    primary: gvk("test.reconciler.dev", "v1", "Widget"),
    generationChangedOnly: true,
  },

  reconcile(request) {
    const widget = request.object;
    if (widget === null) {
      log.info("gone");
      return;
    }
    const metadata = widget.metadata ?? {};
    const spec = widget.spec ?? {};
    const message = "message" in spec ? spec.message : (metadata.name ?? "");
    if (typeof message !== "string") {
      throw permanent(`spec.message must be a string, not ${typeName(message)}`);
    }
    const greeting = `${getenv("GREETING") ?? "hello"}, ${message}`;
    try {
      cluster.patchStatus(request.ref, { observedGeneration: metadata.generation ?? 0, greeting });
    } catch (error) {
      throw transient("status write failed", error);
    }
    // An event is a courtesy: a refused one (the guest's event rate) is logged, not a failure.
    events.normal(request.ref, "Greeted", greeting);
  },
});
