import assert from "node:assert/strict";
import { test } from "node:test";

import { HOST_ERROR_KINDS, HostError, ReconcileError, hostCall, permanent, transient } from "../reconciler-guest/index.js";
import { asHostError, reconcileErrorVariant } from "../reconciler-guest/error.js";
import { hostError } from "reconciler-guest/testing";

test("retryable host errors become transient and the rest permanent", () => {
  const expected = {
    conflict: "transient",
    unavailable: "transient",
    other: "transient",
    invalid: "permanent",
    denied: "permanent",
    "not-found": "permanent",
  };
  assert.deepEqual([...HOST_ERROR_KINDS].sort(), Object.keys(expected).sort());
  for (const [kind, retry] of Object.entries(expected)) {
    const error = new HostError(kind, "what and where");
    const mapped = error.toReconcileError();
    assert.ok(mapped instanceof ReconcileError);
    assert.equal(mapped.kind, retry, kind);
    assert.equal(mapped.message, `${kind}: what and where`);
    assert.equal(error.isTransient(), retry === "transient");
  }
});

test("a host error reads like the contract and is an Error", () => {
  const error = new HostError("not-found", "ConfigMap ns/a");
  assert.ok(error instanceof Error);
  assert.equal(error.name, "HostError");
  assert.equal(error.message, "not-found: ConfigMap ns/a");
  assert.equal(error.kind, "not-found");
  assert.equal(error.text, "ConfigMap ns/a");
  assert.equal(error.toReconcileError("status write failed").message, "status write failed: not-found: ConfigMap ns/a");
});

test("transient and permanent make reconcile errors", () => {
  assert.deepEqual([transient("t").kind, transient("t").message], ["transient", "t"]);
  assert.deepEqual([permanent("p").kind, permanent("p").message], ["permanent", "p"]);
  assert.ok(permanent("p") instanceof Error);
});

test("a cause is appended to the message and kept", () => {
  const cause = new HostError("conflict", "moved");
  const error = transient("status write failed", cause);
  assert.equal(error.message, "status write failed: conflict: moved");
  assert.equal(error.cause, cause);
  assert.equal(permanent("bad", "text").message, "bad: text");
  assert.equal("cause" in permanent("no cause"), false);
});

test("what the bindings throw becomes a HostError; anything else stays as it was", () => {
  const fromBindings = asHostError(hostError("conflict", "resourceVersion changed"));
  assert.ok(fromBindings instanceof HostError);
  assert.deepEqual([fromBindings.kind, fromBindings.text], ["conflict", "resourceVersion changed"]);
  const bare = asHostError({ tag: "denied", val: "no grant" });
  assert.deepEqual([bare.kind, bare.text], ["denied", "no grant"]);
  const bug = new TypeError("not a function");
  assert.equal(asHostError(bug), bug);
  assert.equal(asHostError("text"), "text");
  assert.equal(asHostError({ tag: "transient", val: "x" }).tag, "transient", "not a host error kind");
});

test("hostCall returns the result or throws a HostError", () => {
  assert.equal(hostCall(() => 7), 7);
  assert.throws(
    () =>
      hostCall(() => {
        throw hostError("unavailable", "API server down");
      }),
    (e) => e instanceof HostError && e.kind === "unavailable" && e.text === "API server down",
  );
  assert.throws(
    () =>
      hostCall(() => {
        throw new RangeError("bug");
      }),
    RangeError,
  );
});

test("reconcile's thrown errors become the contract's variant", () => {
  assert.deepEqual(reconcileErrorVariant(permanent("bad spec")), { tag: "permanent", val: "bad spec" });
  assert.deepEqual(reconcileErrorVariant(new HostError("conflict", "moved")), { tag: "transient", val: "conflict: moved" });
  assert.deepEqual(reconcileErrorVariant(new HostError("invalid", "x")), { tag: "permanent", val: "invalid: x" });
  assert.deepEqual(reconcileErrorVariant({ tag: "transient", val: "legacy" }), { tag: "transient", val: "legacy" });
  assert.equal(reconcileErrorVariant(new TypeError("bug")), undefined);
  assert.equal(reconcileErrorVariant(undefined), undefined);
});
