// The thin layer over the bindings, against the fake host: what each call sends, what it returns,
// and that every failure arrives as a HostError.
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { HostError, cluster, events, gvk, lister, log, objectRef, queue } from "../reconciler-guest/index.js";
import { host, hostError } from "reconciler-guest/testing";

const widget = gvk("test.reconciler.dev", "v1", "Widget");
const ref = objectRef(widget, "demo", "w1");
const failWith = (kind, text) => () => {
  throw hostError(kind, text);
};

beforeEach(host.reset);

test("lister.get parses the cached object, or returns null", () => {
  host.answer("get", () => '{"metadata":{"name":"w1"}}');
  assert.deepEqual(lister.get(ref), { metadata: { name: "w1" } });
  host.answer("get", () => null);
  assert.equal(lister.get(ref), null);
  assert.deepEqual(host.callsOf("get"), [[ref], [ref]]);
});

test("lister.list passes namespace and selector, and parses each object", () => {
  host.answer("list", () => ['{"n":1}', '{"n":2}']);
  assert.deepEqual(lister.list(widget, { namespace: "demo", labelSelector: { app: "web" } }), [{ n: 1 }, { n: 2 }]);
  lister.list(widget);
  assert.deepEqual(host.callsOf("list"), [
    [widget, "demo", "app=web"],
    [widget, undefined, undefined],
  ]);
});

test("text from the host that is not JSON is a HostError `other`", () => {
  host.answer("get", () => "{oops");
  assert.throws(() => lister.get(ref), (e) => e instanceof HostError && e.kind === "other" && /Widget demo\/w1 is not JSON/.test(e.text));
});

test("a refused read throws the host's kind and text", () => {
  host.answer("list", failWith("denied", "no read grant for v1/Secret"));
  assert.throws(() => lister.list(gvk("", "v1", "Secret")), { name: "HostError", kind: "denied", text: "no read grant for v1/Secret" });
});

test("cluster.patchStatus sends {status} and parses what the API server returned", () => {
  host.answer("patchStatus", () => '{"status":{"phase":"Ready"},"metadata":{"resourceVersion":"2"}}');
  const returned = cluster.patchStatus(ref, { phase: "Ready" });
  assert.equal(returned.metadata.resourceVersion, "2");
  assert.deepEqual(host.callsOf("patchStatus"), [[ref, '{"status":{"phase":"Ready"}}']]);
  assert.equal(cluster.patchStatusRaw(ref, '{"status":{}}'), '{"status":{"phase":"Ready"},"metadata":{"resourceVersion":"2"}}');
});

test("cluster writes fail with HostErrors", () => {
  host.answer("patchStatus", failWith("conflict", "resourceVersion changed"));
  assert.throws(() => cluster.patchStatus(ref, {}), { kind: "conflict" });
  host.answer("apply", failWith("invalid", "metadata.name: required"));
  assert.throws(() => cluster.apply({ apiVersion: "v1", kind: "ConfigMap" }), { kind: "invalid", text: "metadata.name: required" });
  host.answer("delete", failWith("denied", "no delete grant"));
  assert.throws(() => cluster.delete(ref), { kind: "denied" });
});

test("cluster.apply takes an object or its JSON and returns the applied object; cluster.delete reports whether it deleted", () => {
  const object = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "a", namespace: "demo" } };
  host.answer("apply", (text) => text.replace("}}", ',"resourceVersion":"7"}}'));
  assert.deepEqual(cluster.apply(object).metadata, { ...object.metadata, resourceVersion: "7" });
  assert.equal(cluster.apply(JSON.stringify(object)).metadata.resourceVersion, "7");
  assert.deepEqual(host.callsOf("apply"), [[JSON.stringify(object)], [JSON.stringify(object)]]);
  host.answer("delete", () => true);
  assert.equal(cluster.delete(ref), true);
  host.answer("delete", () => false);
  assert.equal(cluster.delete(ref), false);
});

test("cluster.applyWith sends the fields and the force asked for, not forcing by default", () => {
  const fields = { apiVersion: "apps/v1", kind: "Deployment", metadata: { name: "web", namespace: "demo" } };
  assert.deepEqual(cluster.applyWith(fields).metadata.name, "web");
  cluster.applyWith(fields, { force: false });
  cluster.applyWith(JSON.stringify(fields), { force: true });
  const text = JSON.stringify(fields);
  assert.deepEqual(host.callsOf("applyWith"), [
    [text, { force: false }],
    [text, { force: false }],
    [text, { force: true }],
  ]);
  host.answer("applyWith", failWith("conflict", 'Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas'));
  assert.throws(() => cluster.applyWith(fields), { kind: "conflict", text: /"kubectl": \.spec\.replicas/ });
});

test("queue.enqueue takes a key or a ref, and a delay as whole milliseconds", () => {
  queue.enqueue(ref);
  queue.enqueue({ name: "w2" }, 1500.4);
  queue.enqueue(ref, 3n);
  assert.deepEqual(host.callsOf("enqueue"), [
    [{ namespace: "demo", name: "w1" }, undefined],
    [{ namespace: null, name: "w2" }, 1500],
    [{ namespace: "demo", name: "w1" }, 3],
  ]);
  host.answer("enqueue", failWith("unavailable", "10,000 keys waiting"));
  assert.throws(() => queue.enqueue(ref), { kind: "unavailable" });
});

test("events.record sends the event and throws a refusal", () => {
  events.record(ref, "warning", "BackendFailed", "down");
  assert.deepEqual(host.callsOf("recordEvent"), [[{ regarding: ref, eventType: "warning", reason: "BackendFailed", message: "down" }]]);
  host.answer("recordEvent", failWith("unavailable", "event rate exceeded"));
  assert.throws(() => events.record(ref, "normal", "Synced", "ok"), { kind: "unavailable" });
});

test("events.normal and events.warning log a refusal instead of throwing", () => {
  host.answer("recordEvent", failWith("unavailable", "event rate exceeded"));
  events.normal(ref, "Synced", "ok");
  events.warning(ref, "Failed", "no");
  assert.deepEqual(host.callsOf("log"), [
    ["warn", "could not record event Synced on Widget demo/w1: unavailable: event rate exceeded"],
    ["warn", "could not record event Failed on Widget demo/w1: unavailable: event rate exceeded"],
  ]);
});

test("log writes one formatted line at its level", () => {
  log.info("created %s in %d ms", "w1", 12);
  log.warn("drift on", { name: "w1" });
  log.log("debug", "plain");
  log.error(new TypeError("bad"));
  assert.deepEqual(host.callsOf("log"), [
    ["info", "created w1 in 12 ms"],
    ["warn", 'drift on {"name":"w1"}'],
    ["debug", "plain"],
    ["error", "TypeError: bad"],
  ]);
});

test("format follows util.format's specifiers", () => {
  assert.equal(log.format("%s=%j %i%% %f", "a", { b: [1] }, 3.9, 0.5), 'a={"b":[1]} 3% 0.5');
  assert.equal(log.format("%s and %s", "one"), "one and %s");
  assert.equal(log.format("n", 1, null, undefined, 2n), "n 1 null undefined 2");
  assert.equal(log.format({ a: 1 }, "b"), '{"a":1} b');
  assert.equal(log.format("%d", 5n), "5");
  assert.equal(log.format("%s", { deep: 1n }), '{"deep":"1"}');
  const cycle = {};
  cycle.self = cycle;
  assert.equal(log.format("%j", cycle), "[object Object]");
  assert.equal(log.format(), "");
  assert.equal(log.format("100%% %s"), "100%% %s", "a lone string is left as it is, as by util.format");
  assert.equal(log.format("100%% %s", "done"), "100% done");
});
