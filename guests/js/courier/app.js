// The courier, a reconciler that calls an HTTP API: for each Widget it POSTs `{"widget": "<ns>/<name>",
// "message": <spec.message or name>}` as JSON to `spec.url` and writes what came back into the
// status (`reply` from the JSON body, `requestId` from the `x-request-id` header, `httpStatus`,
// `observedGeneration`). The Go courier (guests/go/courier) does the same; the host's tests run
// both against a local server (host/tests/http_guests.rs).
//
// Its world is `http-controller` (the `wit-world` file beside this one), so it is built with
// StarlingMonkey: `fetch` is the standard one, through the host's wasi:http, and `reconcile` is
// `async`. The host sends only what the grant's `http:` rules allow.
//
// Errors: a Widget without a string `spec.url` is permanent; an answer of 5xx is transient, any
// other non-2xx permanent; a failed fetch (a refused URL among them) is transient (the SDK).

import { cluster, defineReconciler, gvk, permanent, transient } from "./reconciler-guest/index.js";

export const reconciler = defineReconciler({
  manifest: {
    name: "courier",
    primary: gvk("test.reconciler.dev", "v1", "Widget"),
    generationChangedOnly: true,
  },

  async reconcile(request) {
    const widget = request.object;
    if (widget === null) return;
    const url = widget.spec?.url;
    if (typeof url !== "string") throw permanent("spec.url must be a string");
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ widget: `${request.namespace}/${request.name}`, message: widget.spec.message ?? request.name }),
    });
    if (!response.ok) {
      const failed = response.status >= 500 ? transient : permanent;
      throw failed(`POST ${url} answered ${response.status}: ${await response.text()}`);
    }
    const answer = await response.json();
    try {
      cluster.patchStatus(request.ref, {
        observedGeneration: widget.metadata.generation ?? 0,
        reply: answer.reply,
        requestId: response.headers.get("x-request-id"),
        httpStatus: response.status,
      });
    } catch (error) {
      throw transient("status write failed", error);
    }
  },
});
