package reconciler

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

var widget = ObjectRef{Kind: GVK{Group: "test.reconciler.dev", Version: "v1", Kind: "Widget"}, Namespace: "demo", Name: "w1"}

const widgetJSON = `{"apiVersion":"test.reconciler.dev/v1","kind":"Widget","metadata":{"name":"w1","namespace":"demo"}}`

// lines is each call of the fake as its one line.
func lines(fake *FakeHost) []string {
	var lines []string
	for _, call := range fake.Calls() {
		lines = append(lines, call.String())
	}
	return lines
}

func TestPatchStatusSendsAMergePatchOfStatusAndDecodesTheReplyOnlyWhenAsked(t *testing.T) {
	fake := UseFakeHost(t, widgetJSON)
	returned, err := PatchStatus(widget, map[string]any{"greeting": "hi"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`patch-status Widget demo/w1 {"status":{"greeting":"hi"}}`}
	if !reflect.DeepEqual(lines(fake), want) {
		t.Errorf("calls %q", lines(fake))
	}
	if returned.parsed {
		t.Error("the reply was decoded before anyone asked")
	}
	var reply struct {
		Status struct{ Greeting string } `json:"status"`
	}
	if err := returned.Decode(&reply); err != nil || reply.Status.Greeting != "hi" {
		t.Errorf("got %+v, %v", reply, err)
	}
}

func TestAValueThatDoesNotMarshalIsPermanentAndNeverSent(t *testing.T) {
	fake := UseFakeHost(t)
	_, err := PatchStatus(widget, map[string]any{"bad": make(chan int)})
	if permanent, _ := classify(err); err == nil || !permanent {
		t.Errorf("PatchStatus: got %v", err)
	}
	_, err = Apply(func() {})
	if permanent, _ := classify(err); err == nil || !permanent {
		t.Errorf("Apply: got %v", err)
	}
	if len(fake.Calls()) != 0 {
		t.Errorf("calls %q", lines(fake))
	}
}

func TestApplySendsJSONTextAsItIs(t *testing.T) {
	fake := UseFakeHost(t)
	text := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`
	for i, object := range []any{json.RawMessage(text), text, []byte(text)} {
		returned, err := Apply(object)
		if err != nil || returned.JSON() != text || fake.Calls()[i].JSON != text {
			t.Errorf("%T: got %v, %v, calls %q", object, returned, err, lines(fake))
		}
	}
	if _, err := ApplyWith(text, ApplyOptions{}); err != nil || fake.Calls()[3].JSON != text {
		t.Errorf("ApplyWith of text: %v, calls %q", err, lines(fake))
	}
}

func TestApplyWithSendsTheFieldsAndTheForceAsAsked(t *testing.T) {
	fake := UseFakeHost(t)
	fields := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web"}}
	for _, force := range []bool{false, true} {
		if _, err := ApplyWith(fields, ApplyOptions{Force: force}); err != nil {
			t.Fatal(err)
		}
	}
	want := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"}}`
	if got := lines(fake); got[0] != "apply-with force=false "+want || got[1] != "apply-with force=true "+want {
		t.Errorf("calls %q", got)
	}
}

func TestHostErrorsReachTheGuestAsTheyCame(t *testing.T) {
	fake := UseFakeHost(t)
	conflict := &HostError{Kind: Conflict, Message: "Widget demo/w1 changed"}
	fake.Fail(conflict)
	if _, err := PatchStatus(widget, map[string]any{}); err != conflict {
		t.Errorf("PatchStatus: got %v", err)
	}
	if _, err := Get(widget); err != conflict {
		t.Errorf("Get: got %v", err)
	}
	if _, err := Delete(widget); err != conflict {
		t.Errorf("Delete: got %v", err)
	}
	if err := Enqueue(widget.Key(), 0); err != conflict {
		t.Errorf("Enqueue: got %v", err)
	}
}

func TestGetIsNilForAnObjectNotInTheCache(t *testing.T) {
	UseFakeHost(t, widgetJSON)
	found, err := Get(widget)
	if err != nil || found == nil || found.JSON() != widgetJSON {
		t.Errorf("got %v, %v", found, err)
	}
	missing, err := Get(widget.Sibling("w2"))
	if err != nil || missing != nil {
		t.Errorf("got %v, %v", missing, err)
	}
}

func TestListDecodesEveryObjectAndNamesTheOneThatDoesNotFit(t *testing.T) {
	configMap := GVK{Version: "v1", Kind: "ConfigMap"}
	fake := UseFakeHost(t,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"demo","name":"a","labels":{"app":"web"}},"data":{"k":"a"}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"demo","name":"b","labels":{"app":"web"}},"data":{"k":"b"}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"other","name":"c"},"data":5}`)
	objects, err := List(configMap, "demo", "app=web")
	if err != nil || lines(fake)[0] != `list ConfigMap v1 in demo selecting app=web` {
		t.Fatalf("got %v, calls %q", err, lines(fake))
	}
	type configMapData struct {
		Data map[string]string `json:"data"`
	}
	decoded, err := DecodeAll[configMapData](objects)
	if err != nil || len(decoded) != 2 || decoded[1].Data["k"] != "b" {
		t.Errorf("got %+v, %v", decoded, err)
	}
	objects, _ = List(configMap, "", "")
	if _, err := DecodeAll[configMapData](objects); err == nil || err.Error()[:32] != "a ConfigMap from the cache does " {
		t.Errorf("got %v", err)
	}
}

func TestBestEffortEventsLogARefusalAndCarryOn(t *testing.T) {
	fake := UseFakeHost(t)
	fake.Fail(&HostError{Kind: Unavailable, Message: "event rate exceeded"}, "record-event")
	WarningEvent(widget, "BackendFailed", "down")
	want := []string{
		"record-event Warning BackendFailed on Widget demo/w1: down",
		"log warn: could not record event BackendFailed on Widget demo/w1: unavailable: event rate exceeded",
	}
	if !reflect.DeepEqual(lines(fake), want) {
		t.Errorf("calls %q", lines(fake))
	}
	if err := RecordEvent(Event{Regarding: widget, Reason: "Synced"}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("RecordEvent must return the refusal, got %v", err)
	}
}

func TestEnqueueRoundsTheDelayUpToMilliseconds(t *testing.T) {
	fake := UseFakeHost(t)
	key := ObjectKey{Name: "cluster-scoped"}
	_ = Enqueue(key, 0)
	_ = Enqueue(key, 1500*time.Microsecond)
	_ = Enqueue(key, time.Minute)
	want := []string{"enqueue cluster-scoped", "enqueue cluster-scoped after 2ms", "enqueue cluster-scoped after 1m0s"}
	if !reflect.DeepEqual(lines(fake), want) {
		t.Errorf("calls %q", lines(fake))
	}
}

func TestLogLinesAreFormattedAndLevelled(t *testing.T) {
	fake := UseFakeHost(t)
	LogInfof("created %s (%d)", "demo/w1", 3)
	LogErrorf("100%% done")
	Log(LevelTrace, "raw %d")
	want := []string{"info: created demo/w1 (3)", "error: 100% done", "trace: raw %d"}
	if !reflect.DeepEqual(fake.Logs(), want) {
		t.Errorf("logs %q", fake.Logs())
	}
}

func TestAHostCallOutsideAComponentSaysWhy(t *testing.T) {
	defer func() {
		if message, _ := recover().(string); message == "" || message[:31] != "reconciler: no host to call: ho" {
			t.Errorf("got %q", message)
		}
	}()
	Log(LevelInfo, "no host")
}
