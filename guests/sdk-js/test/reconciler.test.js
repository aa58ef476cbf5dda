// defineReconciler: the component's export around a guest.
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { Action, HostError, Request, defineReconciler, gvk, permanent, transient } from "../reconciler-guest/index.js";
import { host } from "reconciler-guest/testing";

const widget = gvk("test.reconciler.dev", "v1", "Widget");
const witRequest = { ref: { kind: widget, namespace: "demo", name: "w1" }, object: '{"spec":{}}', deleting: false, attempt: 0 };
const guest = (reconcile) => defineReconciler({ manifest: { name: "g", primary: widget }, reconcile });

beforeEach(host.reset);

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
  const [[level, line]] = host.callsOf("log");
  assert.equal(level, "error");
  assert.match(line, /^guest threw TypeError: cannot read properties of undefined\n/);
});

test("an async reconcile is awaited and its Action handed back", async () => {
  const result = guest(async (request) => {
    await new Promise((resolve) => setTimeout(resolve, 1));
    return request.name === "w1" ? Action.requeueAfter(1500.4) : undefined;
  }).reconcile(witRequest);
  assert.ok(result instanceof Promise);
  assert.deepEqual(await result, { requeueAfterMs: 1500 });
  assert.deepEqual(await guest(async () => {}).reconcile(witRequest), { requeueAfterMs: undefined });
});

test("an async reconcile rejects with the contract's variant, or with a bug as it was", async () => {
  await assert.rejects(
    guest(async () => {
      throw permanent("bad spec");
    }).reconcile(witRequest),
    { tag: "permanent", val: "bad spec" },
  );
  await assert.rejects(
    guest(async () => {
      throw new HostError("conflict", "resourceVersion changed");
    }).reconcile(witRequest),
    { tag: "transient", val: "conflict: resourceVersion changed" },
  );
  const bug = new RangeError("too deep");
  await assert.rejects(
    guest(async () => {
      throw bug;
    }).reconcile(witRequest),
    (e) => e === bug,
  );
  assert.match(host.callsOf("log")[0][1], /^guest threw RangeError: too deep\n/);
});

test("without an event loop (the QuickJS build) a Promise is refused as a bug", () => {
  const setTimeout = globalThis.setTimeout;
  delete globalThis.setTimeout; // an engine without timers
  try {
    assert.throws(() => guest(async () => {}).reconcile(witRequest), /no event loop to settle it/);
  } finally {
    globalThis.setTimeout = setTimeout;
  }
  assert.match(host.callsOf("log")[0][1], /reconcile returned a Promise, but this build \(QuickJS\)/);
});

test("defineReconciler wants a reconcile function", () => {
  assert.throws(() => defineReconciler({ manifest: { name: "g", primary: widget } }), TypeError);
});
