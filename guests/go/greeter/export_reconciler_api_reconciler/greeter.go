// Package export_reconciler_api_reconciler is the greeter in Go: the same behaviour as
// guests/python/greeter/app.py, pinned by the same fixtures (host/tests/fixtures/greeter-*).
// guests/go/build.sh generates the bindings from wit/ beside it and builds a component with
// stock Go (GOOS=wasip1, -buildmode=c-shared) and the WASI reactor adapter.
//
// Manifest name `greeter`, primary `test.reconciler.dev/v1 Widget`, reconciled only when its
// generation changes. Each reconcile writes `status.observedGeneration` and `status.greeting`
// ("hello, <spec.message or name>") and records a Normal `Greeted` event. A Widget whose
// `spec.message` is not a string is a permanent error; a failed status write is transient.
package export_reconciler_api_reconciler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"wit_component/reconciler_api_cluster"
	"wit_component/reconciler_api_log"
	"wit_component/reconciler_api_reconciler"
	"wit_component/reconciler_api_types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

type (
	action = reconciler_api_types.Action
	rerror = reconciler_api_types.ReconcileError
)

// Manifest tells the host what the guest wants; the host configuration must grant it.
func Manifest() reconciler_api_reconciler.ControllerManifest {
	return reconciler_api_reconciler.ControllerManifest{
		Name:                  "greeter",
		Primary:               reconciler_api_types.Gvk{Group: "test.reconciler.dev", Version: "v1", Kind: "Widget"},
		Namespace:             witTypes.None[string](),
		LabelSelector:         witTypes.None[string](),
		Finalizer:             witTypes.None[string](),
		GenerationChangedOnly: true,
	}
}

// Reconcile greets one Widget.
func Reconcile(request reconciler_api_reconciler.Request) witTypes.Result[action, rerror] {
	done := witTypes.Ok[action, rerror](action{RequeueAfterMs: witTypes.None[uint64]()})
	if request.Object.Tag() == witTypes.OptionNone {
		reconciler_api_log.Log(reconciler_api_log.Level_Info, "gone")
		return done
	}
	var widget struct {
		Metadata map[string]any `json:"metadata"`
		Spec     map[string]any `json:"spec"`
	}
	decoder := json.NewDecoder(strings.NewReader(request.Object.Some()))
	decoder.UseNumber() // keeps the generation as the API server wrote it
	if err := decoder.Decode(&widget); err != nil {
		return permanent(fmt.Sprintf("object is not JSON: %v", err))
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
		return permanent("spec.message must be a string, not " + pythonType(message))
	}
	greeting := "hello, " + text
	generation, ok := widget.Metadata["generation"]
	if !ok {
		generation = 0
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"observedGeneration": generation,
		"greeting":           greeting,
	}})
	if err != nil {
		return permanent(fmt.Sprintf("cannot encode the status patch: %v", err))
	}
	if written := reconciler_api_cluster.PatchStatus(request.Ref, string(patch)); written.Tag() == witTypes.ResultErr {
		return witTypes.Err[action, rerror](reconciler_api_types.MakeReconcileErrorTransient(
			"status write failed: " + describe(written.Err())))
	}
	event := reconciler_api_cluster.RecordEvent(reconciler_api_cluster.Event{
		Regarding: request.Ref,
		EventType: reconciler_api_cluster.EventType_Normal,
		Reason:    "Greeted",
		Message:   greeting,
	})
	if event.Tag() == witTypes.ResultErr {
		// An event is a courtesy: a refused one (the guest's event rate) does not fail the reconcile.
		reconciler_api_log.Log(reconciler_api_log.Level_Warn, "event not recorded: "+describe(event.Err()))
	}
	return done
}

func permanent(message string) witTypes.Result[action, rerror] {
	return witTypes.Err[action, rerror](reconciler_api_types.MakeReconcileErrorPermanent(message))
}

// describe spells a host error as its tag and text, e.g. `denied: no write grant for ...`.
func describe(e reconciler_api_types.Error) string {
	names := []string{"denied", "not-found", "conflict", "invalid", "unavailable", "other"}
	text := map[uint8]func() string{
		reconciler_api_types.Error_Denied:      e.Denied,
		reconciler_api_types.Error_NotFound:    e.NotFound,
		reconciler_api_types.Error_Conflict:    e.Conflict,
		reconciler_api_types.Error_Invalid:     e.Invalid,
		reconciler_api_types.Error_Unavailable: e.Unavailable,
		reconciler_api_types.Error_Other:       e.Other,
	}[e.Tag()]
	return names[e.Tag()] + ": " + text()
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
		if bytes.ContainsAny([]byte(v), ".eE") {
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
