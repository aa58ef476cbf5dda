// The repository's JavaScript test guest `watcher` (guests/js/watcher/app.js): its `map`, natively,
// as the host calls it for a ConfigMap's event (tests/tests/sdk_map.rs calls the built component).
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { gvk } from "../reconciler-guest/index.js";
import { host } from "reconciler-guest/testing";
import { watches } from "../../js/watcher/app.js";

const configMapKind = gvk("", "v1", "ConfigMap");
const configMap = (annotations) => ({ apiVersion: "v1", kind: "ConfigMap", metadata: { namespace: "demo", name: "cm", annotations } });
const map = (object) => watches.map(configMapKind, JSON.stringify(object));

beforeEach(host.reset);

test("a ConfigMap wakes the Widgets of its namespace its annotation lists, each once", () => {
  assert.deepEqual(map(configMap({ "test.reconciler.dev/widgets": "a, b,,a" })), [
    { namespace: "demo", name: "a" },
    { namespace: "demo", name: "b" },
  ]);
  assert.deepEqual(map(configMap({ other: "a" })), []);
  assert.deepEqual(map(configMap(undefined)), []);
  assert.deepEqual(host.calls, [], "map asked the host nothing");
});
