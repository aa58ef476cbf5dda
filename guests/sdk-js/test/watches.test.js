// defineWatches and the watch mappings: the component's optional `watches` export.
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { IndexValue, Mapping, defineWatches, gvk, manifest, objectRef } from "../reconciler-guest/index.js";
import { host } from "reconciler-guest/testing";

const mirror = gvk("mirror.reconciler.dev", "v1alpha1", "Mirror");
const configMap = gvk("", "v1", "ConfigMap");
const namespace = gvk("", "v1", "Namespace");

beforeEach(host.reset);

test("each mapping is the contract's case, as jco's bindings take it", () => {
  assert.deepEqual(Mapping.ownerLabels("o/namespace", "o/name"), {
    tag: "owner-labels",
    val: { namespace: "o/namespace", name: "o/name" },
  });
  assert.deepEqual(Mapping.ownerLabels(null, "o/name"), { tag: "owner-labels", val: { namespace: undefined, name: "o/name" } });
  assert.deepEqual(Mapping.field("spec.targetNamespaces[*]", IndexValue.name), {
    tag: "field",
    val: { field: "spec.targetNamespaces[*]", value: "name" },
  });
  assert.deepEqual(Object.values(IndexValue), ["name", "namespace", "namespaced-name"]);
});

test("watches() is the list as the contract's records, a function watch without its function", () => {
  const map = () => [];
  const watches = defineWatches([
    { kind: configMap, mapping: Mapping.field("spec.source", IndexValue.name) },
    { kind: configMap, mapping: Mapping.ownerLabels("o/namespace", "o/name"), labelSelector: "o/name" },
    { kind: namespace, mapping: Mapping.function(map), namespace: "demo", labelSelector: { team: "a", tier: "b" } },
    { kind: configMap, mapping: Mapping.owner },
  ]).watches();
  assert.deepEqual(watches, [
    { kind: configMap, mapping: { tag: "field", val: { field: "spec.source", value: "name" } }, namespace: undefined, labelSelector: undefined },
    {
      kind: configMap,
      mapping: { tag: "owner-labels", val: { namespace: "o/namespace", name: "o/name" } },
      namespace: undefined,
      labelSelector: "o/name",
    },
    { kind: namespace, mapping: { tag: "function" }, namespace: "demo", labelSelector: "team=a,tier=b" },
    { kind: configMap, mapping: { tag: "owner" }, namespace: undefined, labelSelector: undefined },
  ]);
  assert.deepEqual(host.callsOf("log"), []);
});

test("a bad watch is a TypeError that names it", () => {
  const watches = (...list) => () => defineWatches(list).watches();
  assert.throws(() => defineWatches("x").watches(), /expected a list of \{kind, mapping\}/);
  assert.throws(watches({ kind: { kind: "ConfigMap" }, mapping: Mapping.owner }), /`watches\[0\]\.kind` must be a kind/);
  assert.throws(watches({ kind: configMap, mapping: Mapping.owner }, { kind: configMap }), /`watches\[1\]\.mapping` must be Mapping\.owner/);
  assert.throws(watches({ kind: configMap, mapping: Mapping.field("spec.a", "uid") }), /`watches\[0\]\.mapping`/);
  assert.throws(watches({ kind: configMap, mapping: Mapping.field("", "name") }), /`watches\[0\]\.mapping`/);
  assert.throws(watches({ kind: configMap, mapping: Mapping.function(undefined) }), /Mapping\.function\(map\)/);
  assert.throws(watches({ kind: configMap, mapping: Mapping.ownerLabels("a", "") }), /`watches\[0\]\.mapping`/);
  assert.throws(watches({ kind: configMap, mapping: Mapping.owner, labelselector: "a" }), /unknown option `watches\[0\]\.labelselector`/);
  assert.throws(watches({ kind: configMap, mapping: Mapping.owner, namespace: 3 }), /`watches\[0\]\.namespace` must be a string/);
});

test("the manifest's secondary refuses the mappings only watches take, saying where they go", () => {
  assert.throws(
    () => manifest({ name: "m", primary: mirror, secondary: [{ kind: configMap, mapping: Mapping.field("spec.a", "name") }] }),
    /Mapping\.owner or Mapping\.label\(name\) \(the other mappings are declared with defineWatches\)/,
  );
});

test("map calls the function watches of the kind with the parsed object and returns each key once", () => {
  const seen = [];
  const watches = defineWatches([
    {
      kind: configMap,
      mapping: Mapping.function((object, kind) => {
        seen.push([object.metadata.name, kind.kind]);
        return [
          { namespace: object.metadata.namespace, name: "m1" },
          objectRef(mirror, object.metadata.namespace, "m2"),
        ];
      }),
    },
    { kind: configMap, mapping: Mapping.label("not-a-function") },
    { kind: namespace, mapping: Mapping.function(() => assert.fail("a function of another kind was called")) },
    { kind: configMap, mapping: Mapping.function(() => [{ namespace: "demo", name: "m2" }, { name: "cluster-wide" }]) },
  ]);
  const keys = watches.map(configMap, '{"metadata":{"namespace":"demo","name":"a"}}');
  assert.deepEqual(keys, [
    { namespace: "demo", name: "m1" },
    { namespace: "demo", name: "m2" },
    { namespace: undefined, name: "cluster-wide" },
  ]);
  assert.deepEqual(seen, [["a", "ConfigMap"]]);
  assert.deepEqual(host.callsOf("log"), []);
});

test("map of a kind no function watch declares warns and returns no keys", () => {
  const keys = defineWatches([{ kind: configMap, mapping: Mapping.owner }]).map(configMap, "{}");
  assert.deepEqual(keys, []);
  assert.deepEqual(host.callsOf("log"), [["warn", "map was called for ConfigMap v1, which no Mapping.function watch declares: no keys"]]);
});

test("a map function that throws is logged with the object and traps (the throw goes on)", () => {
  const watches = defineWatches([
    {
      kind: configMap,
      mapping: Mapping.function(() => {
        throw new Error("spec.owner is missing");
      }),
    },
  ]);
  assert.throws(() => watches.map(configMap, '{"metadata":{"namespace":"demo","name":"a"}}'), /spec\.owner is missing/);
  assert.deepEqual(host.callsOf("log"), [["error", "map ConfigMap demo/a: Error: spec.owner is missing"]]);
});

test("a map function that returns no list, or an object that is not JSON, traps the same way", () => {
  const watches = defineWatches([{ kind: configMap, mapping: Mapping.function(() => "demo/a") }]);
  assert.throws(() => watches.map(configMap, '{"metadata":{"name":"a"}}'), /must return a list of keys, not string/);
  assert.throws(() => watches.map(configMap, "not json"), SyntaxError);
  const logged = host.callsOf("log").map(([level, line]) => `${level} ${line.split(":").slice(0, 2).join(":")}`);
  assert.deepEqual(logged, ["error map ConfigMap a: TypeError", "error map ConfigMap v1: SyntaxError"]);
});
