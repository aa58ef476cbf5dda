// The repository's JavaScript greeter (guests/js/greeter/app.js) on this SDK, natively, against
// the public fake host: the paths the offline fixtures (host/tests/fixtures/greeter-*) do not
// reach, a failed status write and a refused event. The fixtures pin the rest, against the
// built component.
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { gvk, objectRef } from "../reconciler-guest/index.js";
import { host, hostError } from "reconciler-guest/testing";
import { reconciler } from "../../js/greeter/app.js";

const ref = objectRef(gvk("test.reconciler.dev", "v1", "Widget"), "demo", "w1");
const widget = {
  apiVersion: "test.reconciler.dev/v1",
  kind: "Widget",
  metadata: { name: "w1", namespace: "demo", generation: 2 },
  spec: { message: "world" },
};

beforeEach(() => {
  host.reset();
  host.load(widget);
});

test("the greeter's manifest", () => {
  const m = reconciler.manifest();
  assert.deepEqual([m.name, m.primary.kind, m.generationChangedOnly], ["greeter", "Widget", true]);
});

test("greets, then records an event", () => {
  assert.deepEqual(reconciler.reconcile(host.request(ref)), { requeueAfterMs: undefined });
  assert.deepEqual(host.callsOf("patchStatus"), [[ref, '{"status":{"observedGeneration":2,"greeting":"hello, world"}}']]);
  assert.deepEqual(host.writes.slice(1), [
    { op: "record-event", event: { regarding: ref, eventType: "normal", reason: "Greeted", message: "hello, world" } },
  ]);
  assert.deepEqual(host.get(ref).status, { observedGeneration: 2, greeting: "hello, world" });
});

test("greets with the GREETING of its environment", () => {
  host.setEnv({ REGION: "eu", GREETING: "bonjour" });
  reconciler.reconcile(host.request(ref));
  assert.equal(host.get(ref).status.greeting, "bonjour, world");
});

test("a gone widget is logged and asks for nothing", () => {
  host.reset();
  assert.deepEqual(reconciler.reconcile(host.request(ref)), { requeueAfterMs: undefined });
  assert.deepEqual([host.writes, host.logs], [[], [{ level: "info", message: "gone" }]]);
});

test("a failed status write is transient", () => {
  host.answer("patchStatus", () => {
    throw hostError("conflict", "resourceVersion changed");
  });
  assert.throws(() => reconciler.reconcile(host.request(ref)), {
    tag: "transient",
    val: "status write failed: conflict: resourceVersion changed",
  });
  assert.equal(host.get(ref).status, undefined);
});

test("a refused event is logged, not a failure", () => {
  host.answer("recordEvent", () => {
    throw hostError("unavailable", "event rate exceeded");
  });
  assert.deepEqual(reconciler.reconcile(host.request(ref)), { requeueAfterMs: undefined });
  assert.deepEqual(host.logs, [{ level: "warn", message: "could not record event Greeted on Widget demo/w1: unavailable: event rate exceeded" }]);
});

test("a message that is not a string is permanent, in Python's words", () => {
  host.load({ ...widget, spec: { message: [1] } });
  assert.throws(() => reconciler.reconcile(host.request(ref)), {
    tag: "permanent",
    val: "spec.message must be a string, not list",
  });
  assert.deepEqual(host.writes, []);
});
