import assert from "node:assert/strict";
import { test } from "node:test";

import {
  Request,
  ReconcileError,
  apiVersionOf,
  describe,
  gvk,
  gvkFromApiVersion,
  keyOf,
  objectRef,
  refOf,
  selector,
} from "../reconciler-guest/index.js";

const widget = gvk("test.reconciler.dev", "v1", "Widget");
const ref = objectRef(widget, "demo", "w1");

test("a gvk round-trips through apiVersion for the core and named groups", () => {
  const core = gvk("", "v1", "ConfigMap");
  assert.equal(apiVersionOf(core), "v1");
  assert.deepEqual(gvkFromApiVersion("v1", "ConfigMap"), core);
  assert.equal(apiVersionOf(widget), "test.reconciler.dev/v1");
  assert.deepEqual(gvkFromApiVersion("test.reconciler.dev/v1", "Widget"), widget);
});

test("refOf names an object from its JSON", () => {
  assert.deepEqual(refOf({ apiVersion: "v1", kind: "ConfigMap", metadata: { namespace: "ns", name: "a" } }), {
    kind: gvk("", "v1", "ConfigMap"),
    namespace: "ns",
    name: "a",
  });
  assert.equal(refOf({ apiVersion: "v1", kind: "Namespace", metadata: { name: "ns" } }).namespace, null);
  assert.equal(refOf({ kind: "X" }), null);
});

test("keys, descriptions and selectors", () => {
  assert.deepEqual(keyOf(ref), { namespace: "demo", name: "w1" });
  assert.deepEqual(keyOf({ name: "n" }), { namespace: null, name: "n" });
  assert.equal(describe(ref), "Widget demo/w1");
  assert.equal(describe(objectRef(gvk("", "v1", "Namespace"), null, "ns")), "Namespace ns");
  assert.equal(selector({ app: "web", tier: "db" }), "app=web,tier=db");
  assert.equal(selector("app in (a,b)"), "app in (a,b)");
});

test("the request parses its object on first read, once", (t) => {
  const parse = t.mock.method(JSON, "parse");
  const request = new Request({ ref, object: '{"spec":{"message":"hi"}}', deleting: false, attempt: 2 });
  assert.equal(parse.mock.callCount(), 0, "not parsed before it is read");
  assert.equal(request.object.spec.message, "hi");
  assert.equal(request.object, request.object);
  assert.equal(parse.mock.callCount(), 1);
  assert.equal(request.json, '{"spec":{"message":"hi"}}');
  assert.deepEqual([request.deleting, request.attempt], [false, 2]);
});

test("the request's key, namespace and name come from its ref", () => {
  const request = new Request({ ref, object: null, deleting: true, attempt: 0 });
  assert.deepEqual(request.key, { namespace: "demo", name: "w1" });
  assert.deepEqual([request.namespace, request.name, request.deleting], ["demo", "w1", true]);
});

test("a gone object is null, whether the host sent null or nothing", () => {
  assert.equal(new Request({ ref, object: null, deleting: false, attempt: 0 }).object, null);
  assert.equal(new Request({ ref, deleting: false, attempt: 0 }).object, null);
});

test("an object that is not JSON is a permanent error naming it", () => {
  const request = new Request({ ref, object: "{not json", deleting: false, attempt: 0 });
  assert.throws(
    () => request.object,
    (e) => e instanceof ReconcileError && e.kind === "permanent" && e.message.startsWith("Widget demo/w1 is not JSON"),
  );
});
