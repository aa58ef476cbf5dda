// The public fake host (../testing/, `reconciler-guest/testing`): what a guest's unit test may
// rely on. Reads answer from the loaded objects as the host's lister does (kind, namespace,
// label selector with the host's grammar and words, order); writes are recorded and change the
// objects as the offline runner does; nothing is sent anywhere.
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { HostError, cluster, events, getenv, gvk, lister, log, objectRef, queue } from "../reconciler-guest/index.js";
import { host, hostError } from "reconciler-guest/testing";

const configMap = gvk("", "v1", "ConfigMap");
const namespace = gvk("", "v1", "Namespace");
const widget = gvk("test.reconciler.dev", "v1", "Widget");
const cm = (ns, name, labels = {}, rest = {}) => ({ apiVersion: "v1", kind: "ConfigMap", metadata: { namespace: ns, name, labels }, ...rest });
const names = (objects) => objects.map((o) => `${o.metadata.namespace ?? ""}/${o.metadata.name}`);

beforeEach(host.reset);

test("objects load as plain objects, JSON text, arrays and Lists, a later one replacing its namesake", () => {
  host.load(
    cm("a", "one", { v: "1" }),
    JSON.stringify(cm("a", "two")),
    JSON.stringify([cm("b", "three")]),
    { apiVersion: "v1", kind: "ConfigMapList", items: [cm("b", "four")] },
    [{ apiVersion: "v1", kind: "Namespace", metadata: { name: "a" } }],
    cm("a", "one", { v: "2" }),
  );
  assert.deepEqual(names(host.list(configMap)), ["a/one", "a/two", "b/four", "b/three"]);
  assert.equal(host.get(objectRef(configMap, "a", "one")).metadata.labels.v, "2");
  assert.throws(() => host.load({ kind: "ConfigMap", metadata: { name: "x" } }), /host\.load: not an object \(apiVersion, kind, metadata\.name\)/);
});

test("get finds an object by group, version, kind, namespace and name, and hands out a copy", () => {
  host.load(cm("a", "one"), { apiVersion: "v1", kind: "Namespace", metadata: { name: "a" } });
  assert.equal(host.get(objectRef(configMap, "a", "one")).metadata.name, "one");
  assert.equal(host.get(objectRef(configMap, "b", "one")), null);
  assert.equal(host.get(objectRef(gvk("", "v2", "ConfigMap"), "a", "one")), null);
  assert.equal(host.get(objectRef(namespace, null, "a")).metadata.name, "a");
  host.get(objectRef(configMap, "a", "one")).metadata.name = "changed";
  assert.equal(lister.get(objectRef(configMap, "a", "one")).metadata.name, "one");
});

test("list takes a namespace (none: all) and sorts by namespace, then name, as the guest's lister sees it", () => {
  host.load(cm("b", "a"), cm("a", "z"), cm("a", "b"), { apiVersion: "test.reconciler.dev/v1", kind: "Widget", metadata: { namespace: "a", name: "w" } });
  assert.deepEqual(names(host.list(configMap)), ["a/b", "a/z", "b/a"]);
  assert.deepEqual(names(host.list(configMap, { namespace: "a" })), ["a/b", "a/z"]);
  assert.deepEqual(names(lister.list(configMap, { namespace: "b" })), ["b/a"]);
  assert.deepEqual(names(lister.list(widget)), ["a/w"]);
});

test("a label selector has the host's operators and matching", () => {
  host.load(
    cm("n", "web", { app: "web", tier: "front" }),
    cm("n", "db", { app: "db", tier: "back", legacy: "" }),
    cm("n", "bare"),
  );
  const selected = (labelSelector) => names(host.list(configMap, { labelSelector })).map((n) => n.slice(2));
  assert.deepEqual(selected("app=web"), ["web"]);
  assert.deepEqual(selected("app==db"), ["db"]);
  assert.deepEqual(selected("app!=web"), ["bare", "db"], "!= selects objects without the label");
  assert.deepEqual(selected("legacy"), ["db"]);
  assert.deepEqual(selected("!legacy"), ["bare", "web"]);
  assert.deepEqual(selected("tier in (front, back)"), ["db", "web"]);
  assert.deepEqual(selected("tier notin (front)"), ["bare", "db"], "notin selects objects without the label");
  assert.deepEqual(selected(" app = web , tier in (front) "), ["web"]);
  assert.deepEqual(selected(""), ["bare", "db", "web"]);
  assert.deepEqual(selected({ app: "db", tier: "back" }), ["db"]);
  assert.deepEqual(names(lister.list(configMap, { labelSelector: "app in (web,db),!legacy" })), ["n/web"]);
});

test("an invalid label selector is the host's `invalid` error, in its words", () => {
  const refused = (labelSelector) => {
    try {
      lister.list(configMap, { labelSelector });
    } catch (error) {
      assert.ok(error instanceof HostError);
      assert.equal(error.kind, "invalid");
      return error.text;
    }
    return assert.fail(`${labelSelector} was taken`);
  };
  assert.equal(refused("a=b,"), 'label-selector: invalid label selector "a=b," at byte 4: expected a label key, found the end of the selector');
  assert.match(refused("a>1"), /at byte 1: operator '>' is not supported here/);
  assert.match(refused("a in x"), /expected '\(' after in\/notin/);
  assert.match(refused("a in (x,y"), /unclosed value list/);
  assert.match(refused("a b"), /expected an operator .* found "b"/);
  assert.match(refused("-a=b"), /label key "-a" is invalid/);
  assert.match(refused("Example.com/a=b"), /invalid prefix/);
  assert.match(refused("a=b_"), /label value "b_" is invalid/);
  assert.throws(() => host.list(configMap, { labelSelector: "a in (" }), (e) => e.payload?.tag === "invalid");
});

test("a status patch merges into the object's status, under a resourceVersion above every loaded one", () => {
  const ref = objectRef(widget, "demo", "w1");
  host.load(
    { apiVersion: "test.reconciler.dev/v1", kind: "Widget", metadata: { namespace: "demo", name: "w1", resourceVersion: "5" }, spec: { a: 1 }, status: { keep: 1, drop: 2, list: [1, 2] } },
    cm("demo", "other", {}, { metadata: { namespace: "demo", name: "other", resourceVersion: "2000" } }),
  );
  const returned = cluster.patchStatus(ref, { drop: null, list: [3], added: { x: 1 } });
  assert.deepEqual(returned.status, { keep: 1, list: [3], added: { x: 1 } });
  assert.equal(returned.metadata.resourceVersion, "2001");
  assert.deepEqual(host.get(ref), returned);
  assert.deepEqual(host.get(ref).spec, { a: 1 });
  assert.deepEqual(host.writes, [{ op: "patch-status", ref, patch: { status: { drop: null, list: [3], added: { x: 1 } } } }]);
});

test("a status patch of an object not loaded, beyond status, or of an old resourceVersion is refused as the host refuses it", () => {
  const ref = objectRef(widget, "demo", "w1");
  assert.throws(() => cluster.patchStatus(ref, {}), { kind: "not-found", text: "Widget demo/w1 is not among the loaded objects" });
  host.load({ apiVersion: "test.reconciler.dev/v1", kind: "Widget", metadata: { namespace: "demo", name: "w1", resourceVersion: "5" } });
  assert.throws(() => cluster.patchStatusRaw(ref, '{"spec":{}}'), { kind: "invalid", text: /^patch\.spec: a status patch carries status/ });
  assert.throws(() => cluster.patchStatusRaw(ref, '{"metadata":{"labels":{}}}'), { kind: "invalid", text: /^patch\.metadata\.labels:/ });
  assert.throws(() => cluster.patchStatusRaw(ref, '{"metadata":{"resourceVersion":"4"},"status":{}}'), { kind: "conflict" });
  assert.equal(JSON.parse(cluster.patchStatusRaw(ref, '{"metadata":{"resourceVersion":"5"},"status":{"ok":true}}')).status.ok, true);
  assert.equal(host.writes.length, 5, "every write is recorded, whatever it was answered");
});

test("an apply creates or merges into the object; apply-with too, recording whether it forced", () => {
  const ref = objectRef(configMap, "demo", "a");
  const created = cluster.apply(cm("demo", "a", { app: "web" }, { data: { x: "1", y: "2" } }));
  assert.equal(created.metadata.resourceVersion, "1001");
  const merged = cluster.applyWith({ apiVersion: "v1", kind: "ConfigMap", metadata: { namespace: "demo", name: "a" }, data: { y: "3", x: null } });
  assert.deepEqual([merged.data, merged.metadata.labels, merged.metadata.resourceVersion], [{ y: "3" }, { app: "web" }, "1002"]);
  assert.deepEqual(host.get(ref), merged);
  cluster.applyWith(cm("demo", "b"), { force: true });
  assert.deepEqual(
    host.writes.map((w) => [w.op, w.object.metadata.name, w.force]),
    [
      ["apply", "a", undefined],
      ["apply-with", "a", false],
      ["apply-with", "b", true],
    ],
  );
  assert.throws(() => cluster.apply({ apiVersion: "v1", kind: "ConfigMap", metadata: {} }), { kind: "invalid" });
  assert.throws(() => cluster.apply(cm("demo", "a", {}, { metadata: { namespace: "demo", name: "a", resourceVersion: "1" } })), { kind: "conflict" });
});

test("a delete removes the object and says whether it was there", () => {
  const ref = objectRef(configMap, "demo", "a");
  host.load(cm("demo", "a"));
  assert.equal(cluster.delete(ref), true);
  assert.equal(host.get(ref), null);
  assert.equal(cluster.delete(ref), false);
  assert.deepEqual(host.writes, [
    { op: "delete", ref },
    { op: "delete", ref },
  ]);
});

test("events, enqueues and logs are recorded, never sent", () => {
  const ref = objectRef(widget, "demo", "w1");
  events.warning(ref, "Slow", "p99");
  queue.enqueue(ref, 1500);
  queue.enqueue({ name: "w2" });
  log.info("done in %d ms", 3);
  assert.deepEqual(host.writes, [
    { op: "record-event", event: { regarding: ref, eventType: "warning", reason: "Slow", message: "p99" } },
    { op: "enqueue", key: { namespace: "demo", name: "w1" }, afterMs: 1500 },
    { op: "enqueue", key: { namespace: null, name: "w2" }, afterMs: null },
  ]);
  assert.deepEqual(host.logs, [{ level: "info", message: "done in 3 ms" }]);
  assert.deepEqual(
    host.calls.map((c) => c.fn),
    ["recordEvent", "enqueue", "enqueue", "log"],
  );
});

test("request is the contract's request for the object held now", () => {
  const w = { apiVersion: "test.reconciler.dev/v1", kind: "Widget", metadata: { namespace: "demo", name: "w1" } };
  host.load(w);
  const ref = objectRef(widget, "demo", "w1");
  assert.deepEqual(host.request(w), { ref, object: JSON.stringify(w), deleting: false, attempt: 0 });
  assert.deepEqual(host.request(ref, { attempt: 2 }), { ref, object: JSON.stringify(w), deleting: false, attempt: 2 });
  host.load({ ...w, metadata: { ...w.metadata, deletionTimestamp: "2026-01-02T03:04:05Z" } });
  assert.equal(host.request(ref).deleting, true);
  assert.deepEqual(host.request(objectRef(widget, "demo", "gone")), { ref: objectRef(widget, "demo", "gone"), object: null, deleting: false, attempt: 0 });
  assert.throws(() => host.request("demo/w1"), /expected an object reference/);
});

test("a scripted answer replaces the fake server's for that import until reset; setEnv is what getenv reads", () => {
  host.load(cm("demo", "a"));
  host.answer("get", () => {
    throw hostError("denied", "no read grant for v1/ConfigMap");
  });
  assert.throws(() => lister.get(objectRef(configMap, "demo", "a")), { kind: "denied", text: "no read grant for v1/ConfigMap" });
  assert.throws(() => host.answer("patch", () => null), /no import "patch"/);
  host.setEnv({ REGION: "eu" });
  assert.equal(getenv("REGION"), "eu");
  host.reset();
  assert.equal(lister.get(objectRef(configMap, "demo", "a")), null);
  assert.equal(getenv("REGION"), undefined);
  assert.deepEqual([host.calls.length, host.writes, host.logs], [2, [], []]);
});
