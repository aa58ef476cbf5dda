// The repository's JavaScript greeter (guests/js/greeter/app.js) on this SDK, natively: the paths
// the offline fixtures (host/tests/fixtures/greeter-*) do not reach, a failed status write and a
// refused event. The fixtures pin the rest, against the built component.
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { reconciler } from "../../js/greeter/app.js";
import { answer, callsOf, hostError, reset } from "./fake-host.js";

const ref = { kind: { group: "test.reconciler.dev", version: "v1", kind: "Widget" }, namespace: "demo", name: "w1" };
const widget = { metadata: { name: "w1", namespace: "demo", generation: 2 }, spec: { message: "world" } };
const request = (object) => ({ ref, object: object === null ? null : JSON.stringify(object), deleting: false, attempt: 0 });

beforeEach(reset);

test("the greeter's manifest", () => {
  const m = reconciler.manifest();
  assert.deepEqual([m.name, m.primary.kind, m.generationChangedOnly], ["greeter", "Widget", true]);
});

test("greets, then records an event", () => {
  assert.deepEqual(reconciler.reconcile(request(widget)), { requeueAfterMs: undefined });
  assert.deepEqual(callsOf("patchStatus"), [[ref, '{"status":{"observedGeneration":2,"greeting":"hello, world"}}']]);
  assert.deepEqual(callsOf("recordEvent"), [[{ regarding: ref, eventType: "normal", reason: "Greeted", message: "hello, world" }]]);
});

test("greets with the GREETING of its environment", () => {
  answer("getEnvironment", () => [["REGION", "eu"], ["GREETING", "bonjour"]]);
  reconciler.reconcile(request(widget));
  assert.deepEqual(callsOf("patchStatus"), [[ref, '{"status":{"observedGeneration":2,"greeting":"bonjour, world"}}']]);
});

test("a failed status write is transient", () => {
  answer("patchStatus", () => {
    throw hostError("conflict", "resourceVersion changed");
  });
  assert.throws(() => reconciler.reconcile(request(widget)), {
    tag: "transient",
    val: "status write failed: conflict: resourceVersion changed",
  });
});

test("a refused event is logged, not a failure", () => {
  answer("recordEvent", () => {
    throw hostError("unavailable", "event rate exceeded");
  });
  assert.deepEqual(reconciler.reconcile(request(widget)), { requeueAfterMs: undefined });
  assert.deepEqual(callsOf("log"), [["warn", "could not record event Greeted on Widget demo/w1: unavailable: event rate exceeded"]]);
});

test("a message that is not a string is permanent, in Python's words", () => {
  assert.throws(() => reconciler.reconcile(request({ ...widget, spec: { message: [1] } })), {
    tag: "permanent",
    val: "spec.message must be a string, not list",
  });
  assert.deepEqual(callsOf("patchStatus"), []);
});
