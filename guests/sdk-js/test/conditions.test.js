import assert from "node:assert/strict";
import { beforeEach, mock, test } from "node:test";

import { conditions } from "../reconciler-guest/index.js";

const at = (time, condition) => ({ ...condition, lastTransitionTime: time });
const T100 = "2026-01-02T03:04:05Z";
const T200 = "2026-01-02T03:05:45Z";

beforeEach(() => mock.restoreAll());

test("now is RFC 3339 in whole seconds with Z", () => {
  mock.method(Date, "now", () => Date.UTC(2026, 0, 2, 3, 4, 5, 999));
  assert.equal(conditions.now(), "2026-01-02T03:04:05Z");
});

test("make stamps now and spells a boolean status as the API does", () => {
  mock.method(Date, "now", () => Date.UTC(2026, 0, 2, 3, 4, 5, 250));
  assert.deepEqual(conditions.make("Ready", true, "Synced", "ok"), {
    type: "Ready",
    status: "True",
    reason: "Synced",
    message: "ok",
    lastTransitionTime: T100,
  });
  assert.equal(conditions.make("Ready", false, "Down", "no", 4).observedGeneration, 4);
  assert.equal(conditions.make("Ready", "Unknown", "Pending", "?").status, "Unknown");
});

test("set adds a missing type", () => {
  const list = [];
  assert.equal(conditions.set(list, at(T100, conditions.make("Ready", true, "Synced", "ok"))), true);
  assert.equal(conditions.isTrue(list, "Ready"), true);
  assert.equal(conditions.isTrue(list, "Degraded"), false);
  assert.equal(conditions.find(list, "Degraded"), null);
  assert.equal(conditions.isTrue(undefined, "Ready"), false);
});

test("set keeps the transition time while the status is unchanged", () => {
  const list = [at(T100, conditions.make("Ready", false, "BackendError", "down"))];
  const changed = conditions.set(list, at(T200, conditions.make("Ready", false, "BackendError", "still down")));
  assert.equal(changed, true, "the message changed");
  assert.equal(list.length, 1);
  assert.equal(list[0].lastTransitionTime, T100);
  assert.equal(list[0].message, "still down");
});

test("set moves the transition time when the status flips", () => {
  const list = [at(T100, conditions.make("Ready", false, "BackendError", "down"))];
  assert.equal(conditions.set(list, at(T200, conditions.make("Ready", true, "Synced", "up"))), true);
  assert.deepEqual(list, [at(T200, conditions.make("Ready", true, "Synced", "up"))]);
});

test("set reports no change for an identical condition and keeps its time", () => {
  const list = [at(T100, conditions.make("Ready", true, "Synced", "up", 3))];
  assert.equal(conditions.set(list, at(T200, conditions.make("Ready", true, "Synced", "up", 3))), false);
  assert.equal(list[0].lastTransitionTime, T100);
});

test("reason and observedGeneration always follow, without moving the time", () => {
  const list = [at(T100, conditions.make("Ready", true, "Synced", "up", 3))];
  assert.equal(conditions.set(list, at(T200, conditions.make("Ready", true, "Resynced", "up", 4))), true);
  assert.deepEqual(list[0], at(T100, conditions.make("Ready", true, "Resynced", "up", 4)));
  assert.equal(conditions.set(list, at(T200, conditions.make("Ready", true, "Resynced", "up"))), true);
  assert.equal("observedGeneration" in list[0], false, "a condition without it drops it");
});

test("set keeps one entry per type and leaves the others alone", () => {
  const list = [at(T100, conditions.make("Ready", true, "Synced", "up")), at(T100, conditions.make("Degraded", false, "Fine", ""))];
  conditions.set(list, at(T200, conditions.make("Degraded", true, "Slow", "p99 high")));
  assert.deepEqual(
    list.map((c) => [c.type, c.status, c.lastTransitionTime]),
    [
      ["Ready", "True", T100],
      ["Degraded", "True", T200],
    ],
  );
});

test("set copies a new condition, so the caller's object stays its own", () => {
  const list = [];
  const condition = at(T100, conditions.make("Ready", true, "Synced", "up"));
  conditions.set(list, condition);
  list[0].message = "changed";
  assert.equal(condition.message, "up");
});

test("remove drops the type and reports whether it was there", () => {
  const list = [at(T100, conditions.make("Ready", true, "Synced", "up"))];
  assert.equal(conditions.remove(list, "Degraded"), false);
  assert.equal(conditions.remove(list, "Ready"), true);
  assert.deepEqual(list, []);
});
