package reconciler

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestGVKRoundTripsAPIVersionForCoreAndNamedGroups(t *testing.T) {
	core := GVK{Version: "v1", Kind: "ConfigMap"}
	if core.APIVersion() != "v1" || GVKOf("v1", "ConfigMap") != core {
		t.Errorf("core group: %q, %+v", core.APIVersion(), GVKOf("v1", "ConfigMap"))
	}
	if network.APIVersion() != "samplecrd.k8s.io/v1" || GVKOf("samplecrd.k8s.io/v1", "Network") != network {
		t.Errorf("named group: %q, %+v", network.APIVersion(), GVKOf("samplecrd.k8s.io/v1", "Network"))
	}
}

func TestRefsAndKeysReadAsInLogLines(t *testing.T) {
	if got := widget.String(); got != "Widget demo/w1" {
		t.Errorf("namespaced: %q", got)
	}
	namespace := ObjectRef{Kind: GVK{Version: "v1", Kind: "Namespace"}, Name: "demo"}
	if got := namespace.String(); got != "Namespace demo" {
		t.Errorf("cluster-scoped: %q", got)
	}
	if got := widget.Sibling("w2").Key(); got != (ObjectKey{Namespace: "demo", Name: "w2"}) || got.String() != "demo/w2" {
		t.Errorf("sibling key: %+v", got)
	}
}

func TestARequestDecodesItsObjectOnlyWhenAsked(t *testing.T) {
	req := NewRequest(widget, `{"metadata": {"name": "w1", "generation": 9007199254740993}}`)
	if req.Gone() || req.Key() != (ObjectKey{Namespace: "demo", Name: "w1"}) {
		t.Fatalf("gone %t, key %+v", req.Gone(), req.Key())
	}
	if req.Object.parsed {
		t.Fatal("decoded before anyone asked")
	}
	fields, err := req.Object.Fields()
	if err != nil {
		t.Fatal(err)
	}
	// Numbers in `any` stay exact: 2^53 + 1 would not survive float64.
	generation := fields["metadata"].(map[string]any)["generation"]
	if generation != json.Number("9007199254740993") {
		t.Errorf("generation %#v", generation)
	}
	fields["seen"] = true
	if again, _ := req.Object.Fields(); again["seen"] != true {
		t.Error("Fields decoded twice")
	}
	if !(&Request{Ref: widget}).Gone() {
		t.Error("a request without an object is gone")
	}
}

func TestAnObjectThatDoesNotFitIsAPermanentErrorNamingIt(t *testing.T) {
	var typed struct {
		Data map[string]string `json:"data"`
	}
	err := NewRequest(widget, `{"data": 5}`).Object.Decode(&typed)
	permanent, message := classify(err)
	if err == nil || !permanent || !strings.HasPrefix(message, "Widget demo/w1 does not decode: ") {
		t.Errorf("got %v (permanent %t)", err, permanent)
	}
	_, err = NewRequest(widget, `not json`).Object.Fields()
	if permanent, message := classify(err); err == nil || !permanent || !strings.Contains(message, "Widget demo/w1 is not a JSON object") {
		t.Errorf("got %v (permanent %t)", err, permanent)
	}
	if _, err := NewRequest(widget, `null`).Object.Fields(); err == nil {
		t.Error("null is not an object")
	}
}

func TestAnObjectNamesItselfFromItsJSON(t *testing.T) {
	ref, ok := ObjectFromJSON(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"ns","name":"a"}}`).Ref()
	if !ok || ref != (ObjectRef{Kind: GVK{Version: "v1", Kind: "ConfigMap"}, Namespace: "ns", Name: "a"}) {
		t.Errorf("got %+v, %t", ref, ok)
	}
	ref, ok = ObjectFromJSON(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns"}}`).Ref()
	if !ok || ref.Namespace != "" {
		t.Errorf("cluster-scoped: %+v, %t", ref, ok)
	}
	if _, ok := ObjectFromJSON(`{"kind":"X"}`).Ref(); ok {
		t.Error("no apiVersion and no name: no ref")
	}
}
