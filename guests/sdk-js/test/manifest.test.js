import assert from "node:assert/strict";
import { test } from "node:test";

import { Mapping, gvk, manifest } from "../reconciler-guest/index.js";

const widget = gvk("test.reconciler.dev", "v1", "Widget");

test("name and primary alone give the contract's defaults", () => {
  assert.deepEqual(manifest({ name: "widget", primary: widget }), {
    name: "widget",
    primary: widget,
    namespace: undefined,
    labelSelector: undefined,
    secondary: [],
    finalizer: undefined,
    concurrency: 0,
    resyncSeconds: 0,
    generationChangedOnly: false,
  });
});

test("every option is set exactly as asked", () => {
  const configMap = gvk("", "v1", "ConfigMap");
  const m = manifest({
    name: "widget",
    primary: widget,
    namespace: "demo",
    labelSelector: { app: "web", tier: "backend" },
    secondary: [
      { kind: configMap, mapping: Mapping.owner },
      { kind: gvk("", "v1", "Secret"), mapping: Mapping.label("widget") },
    ],
    finalizer: "test.reconciler.dev/cleanup",
    concurrency: 2,
    resyncSeconds: 300,
    generationChangedOnly: true,
  });
  assert.equal(m.namespace, "demo");
  assert.equal(m.labelSelector, "app=web,tier=backend");
  assert.deepEqual(m.secondary, [
    { kind: configMap, mapping: { tag: "owner" } },
    { kind: gvk("", "v1", "Secret"), mapping: { tag: "label", val: "widget" } },
  ]);
  assert.equal(m.finalizer, "test.reconciler.dev/cleanup");
  assert.deepEqual([m.concurrency, m.resyncSeconds, m.generationChangedOnly], [2, 300, true]);
  assert.equal(manifest({ name: "w", primary: widget, labelSelector: "app!=db" }).labelSelector, "app!=db");
});

test("a manifest is its own options: passing it again changes nothing", () => {
  const once = manifest({ name: "widget", primary: widget, finalizer: "a.b/c", namespace: null });
  assert.deepEqual(manifest(once), once);
});

test("a missing, unknown or wrongly typed option is refused by name", () => {
  assert.throws(() => manifest({ primary: widget }), /`name` is required/);
  assert.throws(() => manifest({ name: "w" }), /`primary` must be a kind/);
  assert.throws(() => manifest({ name: "w", primary: { group: "", kind: "X" } }), /`primary` must be a kind/);
  assert.throws(() => manifest({ name: "w", primary: widget, generationChangeOnly: true }), /unknown option `generationChangeOnly`/);
  assert.throws(() => manifest({ name: "w", primary: widget, concurrency: -1 }), /`concurrency` must be a whole number/);
  assert.throws(() => manifest({ name: "w", primary: widget, resyncSeconds: 1.5 }), /`resyncSeconds`/);
  assert.throws(() => manifest({ name: "w", primary: widget, finalizer: 5 }), /`finalizer` must be a string/);
  assert.throws(
    () => manifest({ name: "w", primary: widget, secondary: [{ kind: widget, mapping: "owner" }] }),
    /`secondary\[0\]\.mapping` must be Mapping.owner/,
  );
  assert.throws(() => manifest(undefined), TypeError);
});
