// fetch in a guest (reconciler-guest/error.js): its failures marked with the request, so that one
// escaping `reconcile` is a transient error naming it instead of a bug that traps.
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { defineReconciler, gvk } from "../reconciler-guest/index.js";
import { failedRequest, marking } from "../reconciler-guest/error.js";
import { host } from "reconciler-guest/testing";

const widget = gvk("test.reconciler.dev", "v1", "Widget");
const witRequest = { ref: { kind: widget, namespace: "demo", name: "w1" }, object: "{}", deleting: false, attempt: 0 };
// StarlingMonkey's one rejection for every failure, a refusal by the grant included.
const networkError = () => new TypeError("NetworkError when attempting to fetch resource");

beforeEach(host.reset);

test("the SDK puts the marking fetch in place of the engine's", () => {
  assert.equal(marking(globalThis.fetch), globalThis.fetch);
});

test("marking passes arguments, results and rejections through, and marks the rejections", async () => {
  const seen = [];
  const answered = new Response("ok");
  const fetch = marking(async (input, init) => {
    seen.push([input, init]);
    if (String(input.url ?? input).endsWith("/down")) throw networkError();
    return answered;
  });
  assert.equal(await fetch("http://api.test/up", { method: "PUT" }), answered);
  assert.deepEqual(seen, [["http://api.test/up", { method: "PUT" }]]);

  const failed = await fetch("http://api.test/down").catch((e) => e);
  assert.ok(failed instanceof TypeError);
  assert.equal(failed.message, "NetworkError when attempting to fetch resource");
  assert.equal(failedRequest(failed), "GET http://api.test/down");
  const fromRequest = await fetch(new Request("http://api.test/down", { method: "DELETE" })).catch((e) => e);
  assert.equal(failedRequest(fromRequest), "DELETE http://api.test/down");
  assert.equal(failedRequest(networkError()), undefined);
});

test("a failed fetch out of reconcile is a transient error naming the request", async () => {
  const fetch = marking(async () => {
    throw networkError();
  });
  const reconciler = defineReconciler({
    manifest: { name: "g", primary: widget },
    async reconcile() {
      await fetch("https://dns.test/zones/a", { method: "PATCH" });
    },
  });
  await assert.rejects(reconciler.reconcile(witRequest), {
    tag: "transient",
    val:
      "PATCH https://dns.test/zones/a: NetworkError when attempting to fetch resource " +
      "(the reason is in the host's log; a URL outside the grant's http: rules fails so too)",
  });
  assert.deepEqual(host.callsOf("log"), []);
});
