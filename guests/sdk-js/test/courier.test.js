// The repository's JavaScript courier (guests/js/courier/app.js) on this SDK, natively, against
// the public fake host, its `fetch` a stub: what it sends and how it answers each outcome.
// host/tests/http_guests.rs runs the built component in the host against a local server,
// through the grant's http: rules.
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";

import { reconciler } from "../../js/courier/app.js";
import { marking } from "../reconciler-guest/error.js";
import { host, hostError } from "reconciler-guest/testing";

const ref = { kind: { group: "test.reconciler.dev", version: "v1", kind: "Widget" }, namespace: "demo", name: "w1" };
const url = "http://api.test/greetings";
const widget = {
  apiVersion: "test.reconciler.dev/v1",
  kind: "Widget",
  metadata: { name: "w1", namespace: "demo", generation: 3 },
  spec: { url, message: "world" },
};
const request = (object) => ({ ref, object: object === null ? null : JSON.stringify(object), deleting: false, attempt: 0 });

const engineFetch = globalThis.fetch;
let sent;
/** The stub fetch answers every request with `respond(request)`. */
function server(respond) {
  globalThis.fetch = marking(async (input, init) => {
    const req = new Request(input, init);
    sent.push({ method: req.method, url: req.url, type: req.headers.get("content-type"), body: await req.text() });
    return respond(req);
  });
}

beforeEach(() => {
  host.reset();
  host.load(widget);
  sent = [];
});
afterEach(() => {
  globalThis.fetch = engineFetch;
});

test("POSTs the widget as JSON and writes the answer into the status", async () => {
  server(() => Response.json({ reply: "hello, world" }, { headers: { "x-request-id": "r-1" } }));
  assert.deepEqual(await reconciler.reconcile(request(widget)), { requeueAfterMs: undefined });
  assert.deepEqual(sent, [
    { method: "POST", url, type: "application/json", body: '{"widget":"demo/w1","message":"world"}' },
  ]);
  assert.deepEqual(host.callsOf("patchStatus"), [
    [ref, '{"status":{"observedGeneration":3,"reply":"hello, world","requestId":"r-1","httpStatus":200}}'],
  ]);
});

test("a 5xx answer is transient, any other failure status permanent", async () => {
  server(() => new Response("overloaded", { status: 503 }));
  await assert.rejects(reconciler.reconcile(request(widget)), {
    tag: "transient",
    val: `POST ${url} answered 503: overloaded`,
  });
  server(() => new Response("no such zone", { status: 404 }));
  await assert.rejects(reconciler.reconcile(request(widget)), { tag: "permanent" });
  assert.deepEqual(host.callsOf("patchStatus"), []);
});

test("a failed fetch is transient and names the request", async () => {
  server(() => {
    throw new TypeError("NetworkError when attempting to fetch resource");
  });
  await assert.rejects(reconciler.reconcile(request(widget)), (e) => e.tag === "transient" && e.val.startsWith(`POST ${url}: NetworkError`));
});

test("a widget without a URL is permanent; a gone one asks for nothing", async () => {
  server(() => assert.fail("nothing is sent"));
  await assert.rejects(reconciler.reconcile(request({ ...widget, spec: {} })), {
    tag: "permanent",
    val: "spec.url must be a string",
  });
  assert.deepEqual(await reconciler.reconcile(request(null)), { requeueAfterMs: undefined });
});

test("a failed status write is transient", async () => {
  server(() => Response.json({ reply: "hello, world" }));
  host.answer("patchStatus", () => {
    throw hostError("conflict", "resourceVersion changed");
  });
  await assert.rejects(reconciler.reconcile(request(widget)), {
    tag: "transient",
    val: "status write failed: conflict: resourceVersion changed",
  });
});
