// Package export_reconciler_api_reconciler is the courier in Go, on the Go SDK and its
// wasihttp package (the standard http.Client over the host's wasi:http): the same behaviour as
// the JavaScript courier (guests/js/courier/app.js); the host's tests run both against a local
// server (host/tests/http_guests.rs). Its world is `http-controller` (the `wit-world` file).
//
// For each Widget it POSTs `{"widget": "<ns>/<name>", "message": <spec.message or name>}` as
// JSON to `spec.url` and writes what came back into the status (`reply` from the JSON body,
// `requestId` from the `x-request-id` header, `httpStatus`, `observedGeneration`).
//
// Errors: a Widget without a string `spec.url` is permanent; an answer of 5xx is transient, any
// other non-2xx permanent; a request the host refused is permanent (`denied`), one that failed
// on the way transient (`unavailable`): the SDK's classification of the HostError in the chain.
package export_reconciler_api_reconciler

import (
	"bytes"
	"encoding/json"
	"io"

	"wit_component/reconciler"
	"wit_component/reconciler/wasihttp"
)

func init() {
	widget := reconciler.GVK{Group: "test.reconciler.dev", Version: "v1", Kind: "Widget"}
	reconciler.Register(reconciler.NewManifest("courier", widget).WithGenerationChangedOnly(), deliver)
}

func deliver(req *reconciler.Request) (reconciler.Action, error) {
	if req.Gone() {
		return reconciler.Action{}, nil
	}
	var widget struct {
		Metadata struct {
			Generation int64 `json:"generation"`
		} `json:"metadata"`
		Spec struct {
			URL     any     `json:"url"`
			Message *string `json:"message"`
		} `json:"spec"`
	}
	if err := req.Object.Decode(&widget); err != nil {
		return reconciler.Action{}, err
	}
	url, ok := widget.Spec.URL.(string)
	if !ok {
		return reconciler.Action{}, reconciler.Permanentf("spec.url must be a string")
	}
	message := req.Ref.Name
	if widget.Spec.Message != nil {
		message = *widget.Spec.Message
	}
	payload, err := json.Marshal(map[string]string{"widget": req.Ref.Namespace + "/" + req.Ref.Name, "message": message})
	if err != nil {
		return reconciler.Action{}, err
	}
	resp, err := wasihttp.Client.Post(url, "application/json", bytes.NewReader(payload))
	if err != nil {
		return reconciler.Action{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return reconciler.Action{}, err
	}
	if resp.StatusCode/100 != 2 {
		failed := reconciler.Permanentf
		if resp.StatusCode >= 500 {
			failed = reconciler.Transientf
		}
		return reconciler.Action{}, failed("POST %s answered %d: %s", url, resp.StatusCode, body)
	}
	var answer struct {
		Reply any `json:"reply"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return reconciler.Action{}, reconciler.Permanentf("POST %s answered with no JSON: %w", url, err)
	}
	var requestID any
	if id := resp.Header.Get("X-Request-Id"); id != "" {
		requestID = id
	}
	status := map[string]any{
		"observedGeneration": widget.Metadata.Generation,
		"reply":              answer.Reply,
		"requestId":          requestID,
		"httpStatus":         resp.StatusCode,
	}
	if _, err := reconciler.PatchStatus(req.Ref, status); err != nil {
		return reconciler.Action{}, reconciler.Transientf("status write failed: %w", err)
	}
	return reconciler.Action{}, nil
}
