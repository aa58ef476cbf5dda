// defineReconciler: the component's export around a guest.
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { Action, HostError, Request, defineReconciler, gvk, permanent, transient } from "../reconciler-guest/index.js";
import { callsOf, reset } from "./fake-host.js";

const widget = gvk("test.reconciler.dev", "v1", "Widget");
const witRequest = { ref: { kind: widget, namespace: "demo", name: "w1" }, object: '{"spec":{}}', deleting: false, attempt: 0 };
const guest = (reconcile) => defineReconciler({ manifest: { name: "g", primary: widget }, reconcile });

beforeEach(reset);

test("the manifest is built from options or from a function returning them", () => {
  assert.equal(guest(() => {}).manifest().concurrency, 0);
  const fromFunction = defineReconciler({ manifest: () => ({ name: "f", primary: widget, concurrency: 3 }), reconcile() {} });
  assert.deepEqual([fromFunction.manifest().name, fromFunction.manifest().concurrency], ["f", 3]);
});

test("reconcile receives a Request and returning nothing awaits a change", () => {
  let seen;
  const result = guest((request) => {
    seen = request;
  }).reconcile(witRequest);
  assert.ok(seen instanceof Request);
  assert.deepEqual(seen.key, { namespace: "demo", name: "w1" });
  assert.deepEqual(result, { requeueAfterMs: undefined });
});

test("an Action is handed back with whole milliseconds", () => {
  assert.deepEqual(guest(() => Action.requeueAfter(2500)).reconcile(witRequest), { requeueAfterMs: 2500 });
  assert.deepEqual(guest(() => ({ requeueAfterMs: 10n })).reconcile(witRequest), { requeueAfterMs: 10 });
  assert.deepEqual(guest(() => Action.awaitChange()).reconcile(witRequest), { requeueAfterMs: undefined });
});

test("reconcile errors and host errors are thrown as the contract's variant", () => {
  const thrown = (reconcile) => {
    try {
      guest(reconcile).reconcile(witRequest);
    } catch (e) {
      return e;
    }
    assert.fail("nothing thrown");
  };
  assert.deepEqual(
    thrown(() => {
      throw permanent("bad spec");
    }),
    { tag: "permanent", val: "bad spec" },
  );
  assert.deepEqual(
    thrown(() => {
      throw transient("later");
    }),
    { tag: "transient", val: "later" },
  );
  assert.deepEqual(
    thrown(() => {
      throw new HostError("unavailable", "API server down");
    }),
    { tag: "transient", val: "unavailable: API server down" },
  );
});

test("any other exception is logged at error level and thrown on, so the instance traps", () => {
  const bug = new TypeError("cannot read properties of undefined");
  assert.throws(
    () =>
      guest(() => {
        throw bug;
      }).reconcile(witRequest),
    (e) => e === bug,
  );
  const [[level, line]] = callsOf("log");
  assert.equal(level, "error");
  assert.match(line, /^guest threw TypeError: cannot read properties of undefined\n/);
});

test("an async reconcile is refused: nothing would settle its Promise", () => {
  assert.throws(() => guest(async () => {}).reconcile(witRequest), /must be synchronous/);
  assert.match(callsOf("log")[0][1], /reconcile returned a Promise/);
});

test("defineReconciler wants a reconcile function", () => {
  assert.throws(() => defineReconciler({ manifest: { name: "g", primary: widget } }), TypeError);
});
