// Package export_reconciler_api_reconciler is the greeter in Go, on the Go SDK (package
// reconciler, guests/sdk-go): the same behaviour as every other language's greeter, pinned by
// the same fixtures (host/tests/fixtures/greeter-*). guests/go/build.sh adds the SDK and the
// bindings generated from wit/ and builds a component with stock Go (GOOS=wasip1,
// -buildmode=c-shared) and the WASI reactor adapter.
//
// Manifest name `greeter`, primary `test.reconciler.dev/v1 Widget`, reconciled only when its
// generation changes. Each reconcile writes `status.observedGeneration` and `status.greeting`
// ("<GREETING or hello>, <spec.message or name>", GREETING from the grant's `env`) and records a
// Normal `Greeted` event. A Widget whose `spec.message` is not a string is a permanent error; a
// failed status write is transient.
package export_reconciler_api_reconciler

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"wit_component/reconciler"
)

func init() {
	widget := reconciler.GVK{Group: "test.reconciler.dev", Version: "v1", Kind: "Widget"}
	reconciler.Register(reconciler.NewManifest("greeter", widget).WithGenerationChangedOnly(), greet)
}

// greet greets one Widget.
func greet(req *reconciler.Request) (reconciler.Action, error) {
	if req.Gone() {
		reconciler.Log(reconciler.LevelInfo, "gone")
		return reconciler.Action{}, nil
	}
	var widget struct {
		Metadata map[string]any `json:"metadata"`
		Spec     map[string]any `json:"spec"`
	}
	if err := req.Object.Decode(&widget); err != nil {
		return reconciler.Action{}, err
	}
	message, ok := widget.Spec["message"]
	if !ok {
		message, ok = widget.Metadata["name"]
		if !ok {
			message = ""
		}
	}
	text, ok := message.(string)
	if !ok {
		return reconciler.Action{}, reconciler.Permanentf("spec.message must be a string, not %s", pythonType(message))
	}
	word, ok := os.LookupEnv("GREETING")
	if !ok {
		word = "hello"
	}
	greeting := word + ", " + text
	generation, ok := widget.Metadata["generation"]
	if !ok {
		generation = 0
	}
	status := map[string]any{"observedGeneration": generation, "greeting": greeting}
	if _, err := reconciler.PatchStatus(req.Ref, status); err != nil {
		return reconciler.Action{}, reconciler.Transientf("status write failed: %w", err)
	}
	reconciler.NormalEvent(req.Ref, "Greeted", greeting)
	return reconciler.Action{}, nil
}

// pythonType names a decoded JSON value's type as Python does, so that every language's greeter
// fails in the same words.
func pythonType(value any) string {
	switch v := value.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case json.Number:
		if strings.ContainsAny(string(v), ".eE") {
			return "float"
		}
		return "int"
	case []any:
		return "list"
	case map[string]any:
		return "dict"
	default:
		return fmt.Sprintf("%T", v)
	}
}
