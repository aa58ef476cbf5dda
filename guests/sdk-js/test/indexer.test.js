// The repository's JavaScript test guest `indexer` (guests/js/indexer/app.js), natively, against
// the public fake host: its computed index's values, as the host would keep them, and what a
// reconcile writes from the ConfigMaps it reads. A guest author's tests look like this.
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { gvk, objectRef } from "../reconciler-guest/index.js";
import { host } from "reconciler-guest/testing";
import { indexes, reconciler } from "../../js/indexer/app.js";

const widgetKind = gvk("test.reconciler.dev", "v1", "Widget");
const ref = objectRef(widgetKind, "demo", "w1");
const widget = (configMaps) => ({
  apiVersion: "test.reconciler.dev/v1",
  kind: "Widget",
  metadata: { namespace: "demo", name: "w1", generation: 4, annotations: configMaps === undefined ? {} : { "test.reconciler.dev/configmaps": configMaps } },
});
const configMap = (namespace, name, resourceVersion) => ({ apiVersion: "v1", kind: "ConfigMap", metadata: { namespace, name, resourceVersion } });
/** The values the host would keep in index `configmaps` for `primary`. */
const values = (primary) => indexes.index("configmaps", JSON.stringify(primary));

beforeEach(host.reset);

test("its manifest and its one index, looked up by a ConfigMap's name", () => {
  assert.deepEqual([reconciler.manifest().name, reconciler.manifest().secondary], ["indexer", []]);
  assert.deepEqual(indexes.indexes(), [
    { name: "configmaps", kind: gvk("", "v1", "ConfigMap"), lookup: "name", namespace: undefined, labelSelector: undefined },
  ]);
});

test("a Widget's values are the names its annotation lists, trimmed, each once", () => {
  assert.deepEqual(values(widget("a, b,a ,, c")), ["a", "b", "c"]);
  assert.deepEqual(values(widget("")), []);
  assert.deepEqual(values(widget(undefined)), []);
  assert.deepEqual(host.logs, [], "no line logged, no host call: index may only compute");
  assert.deepEqual(host.calls, []);
});

test("a reconcile writes each listed ConfigMap's resourceVersion, null for one not in its namespace", () => {
  host.load(widget("a, b"), configMap("demo", "a", "11"), configMap("other", "b", "12"));
  assert.deepEqual(reconciler.reconcile(host.request(ref)), { requeueAfterMs: undefined });
  assert.deepEqual(host.get(ref).status, {
    configMaps: [
      { name: "a", resourceVersion: "11" },
      { name: "b", resourceVersion: null },
    ],
    observedGeneration: 4,
  });
  assert.deepEqual(host.writes.map((w) => w.op), ["patch-status"]);
});

test("a reconcile whose status is already written writes nothing; a ConfigMap's change is written", () => {
  host.load(widget("a"), configMap("demo", "a", "11"));
  reconciler.reconcile(host.request(ref));
  reconciler.reconcile(host.request(ref));
  assert.equal(host.writes.length, 1);
  host.load(configMap("demo", "a", "13"));
  reconciler.reconcile(host.request(ref));
  assert.deepEqual(host.get(ref).status.configMaps, [{ name: "a", resourceVersion: "13" }]);
  assert.equal(host.writes.length, 2);
});
