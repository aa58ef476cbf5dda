// defineIndexes: the component's optional `indexes` export (world `indexing-controller`).
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { IndexValue, defineIndexes, gvk } from "../reconciler-guest/index.js";
import { host } from "reconciler-guest/testing";

const configMap = gvk("", "v1", "ConfigMap");
const secret = gvk("", "v1", "Secret");
const listed = (primary) => primary.metadata.annotations?.["example.com/configmaps"]?.split(",") ?? [];

beforeEach(host.reset);

test("indexes() is the list as the contract's records, lookup by name unless told, without the functions", () => {
  const indexes = defineIndexes([
    { name: "configmaps", kind: configMap, index: listed },
    { name: "secrets", kind: secret, index: () => [], lookup: IndexValue.namespacedName, namespace: "demo", labelSelector: { team: "a", tier: "b" } },
    { name: "namespaces", kind: configMap, index: () => [], lookup: IndexValue.namespace, labelSelector: "app in (web)" },
  ]).indexes();
  assert.deepEqual(indexes, [
    { name: "configmaps", kind: configMap, lookup: "name", namespace: undefined, labelSelector: undefined },
    { name: "secrets", kind: secret, lookup: "namespaced-name", namespace: "demo", labelSelector: "team=a,tier=b" },
    { name: "namespaces", kind: configMap, lookup: "namespace", namespace: undefined, labelSelector: "app in (web)" },
  ]);
  assert.deepEqual(host.logs, []);
});

test("a bad index is a TypeError that names it", () => {
  const indexes = (...list) => () => defineIndexes(list).indexes();
  const ok = { name: "a", kind: configMap, index: listed };
  assert.throws(() => defineIndexes("x").indexes(), /expected a list of \{name, kind, index\}/);
  assert.throws(indexes({ ...ok, name: undefined }), /`indexes\[0\]\.name` must be the index's name/);
  assert.throws(indexes({ ...ok, kind: { kind: "ConfigMap" } }), /defineIndexes: `indexes\[0\]\.kind` must be a kind/);
  assert.throws(indexes({ ...ok, index: undefined }), /`indexes\[0\]\.index` must be a function/);
  assert.throws(indexes({ ...ok, lookup: "uid" }), /`indexes\[0\]\.lookup` must be IndexValue\.name/);
  assert.throws(indexes({ ...ok, namespace: 3 }), /`indexes\[0\]\.namespace` must be a string/);
  assert.throws(indexes({ ...ok, labelSelector: 3 }), /`indexes\[0\]\.labelSelector` must be a string or \{label: value\}/);
  assert.throws(indexes({ ...ok, values: listed }), /unknown option `indexes\[0\]\.values` \(known: name, kind, index, lookup, namespace, labelSelector\)/);
});

test("index calls the named index's function with the parsed primary and returns its values", () => {
  const seen = [];
  const indexes = defineIndexes([
    { name: "secrets", kind: secret, index: () => assert.fail("another index's function was called") },
    {
      name: "configmaps",
      kind: configMap,
      index: (primary) => {
        seen.push(primary.metadata.name);
        return listed(primary);
      },
    },
  ]);
  const primary = { metadata: { name: "web", annotations: { "example.com/configmaps": "a,b" } } };
  assert.deepEqual(indexes.index("configmaps", JSON.stringify(primary)), ["a", "b"]);
  assert.deepEqual(indexes.index("configmaps", '{"metadata":{"name":"bare"}}'), []);
  assert.deepEqual(seen, ["web", "bare"]);
  assert.deepEqual(host.logs, []);
});

test("index of a name no index declares warns and returns no values", () => {
  assert.deepEqual(defineIndexes([{ name: "a", kind: configMap, index: listed }]).index("b", "{}"), []);
  assert.deepEqual(host.logs, [{ level: "warn", message: 'index was called for "b", which no index of defineIndexes declares: no values' }]);
});

test("an index function that throws is logged with the primary and traps (the throw goes on)", () => {
  const indexes = defineIndexes([
    {
      name: "configmaps",
      kind: configMap,
      index: () => {
        throw new Error("spec.refs is missing");
      },
    },
  ]);
  const primary = '{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"namespace":"demo","name":"web"}}';
  assert.throws(() => indexes.index("configmaps", primary), /spec\.refs is missing/);
  assert.deepEqual(host.logs, [{ level: "error", message: "index configmaps of Deployment demo/web: Error: spec.refs is missing" }]);
});

test("values that are not a list of strings, or a primary that is not JSON, trap the same way", () => {
  const returning = (values) => defineIndexes([{ name: "i", kind: configMap, index: () => values }]);
  assert.throws(() => returning("a,b").index("i", '{"metadata":{"name":"p"}}'), /must return a list of strings, not string/);
  assert.throws(() => returning(undefined).index("i", "{}"), /must return a list of strings, not undefined/);
  assert.throws(() => returning(["a", 1]).index("i", "{}"), /must return strings, but value 1 is number/);
  assert.throws(() => returning([]).index("i", "not json"), SyntaxError);
  assert.deepEqual(
    host.logs.map(({ level, message }) => `${level} ${message.split(":")[0]}`),
    ["error index i of p", "error index i of a primary", "error index i of a primary", "error index i of a primary"],
  );
});
