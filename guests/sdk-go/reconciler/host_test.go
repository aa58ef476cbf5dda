package reconciler

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestPatchStatusSendsAMergePatchOfStatusAndDecodesTheReplyOnlyWhenAsked(t *testing.T) {
	fake := useFake(t)
	returned, err := PatchStatus(widget, map[string]any{"greeting": "hi"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`patch-status Widget demo/w1 {"status":{"greeting":"hi"}}`}
	if !reflect.DeepEqual(fake.calls, want) {
		t.Errorf("calls %q", fake.calls)
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
	fake := useFake(t)
	_, err := PatchStatus(widget, map[string]any{"bad": make(chan int)})
	if permanent, _ := classify(err); err == nil || !permanent {
		t.Errorf("PatchStatus: got %v", err)
	}
	_, err = Apply(func() {})
	if permanent, _ := classify(err); err == nil || !permanent {
		t.Errorf("Apply: got %v", err)
	}
	if len(fake.calls) != 0 {
		t.Errorf("calls %q", fake.calls)
	}
}

func TestApplySendsJSONTextAsItIs(t *testing.T) {
	fake := useFake(t)
	text := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`
	returned, err := Apply(json.RawMessage(text))
	if err != nil || returned.JSON() != text || fake.calls[0] != "apply "+text {
		t.Errorf("got %v, %v, calls %q", returned, err, fake.calls)
	}
}

func TestApplyWithSendsTheFieldsAndTheForceAsAsked(t *testing.T) {
	fake := useFake(t)
	fields := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web"}}
	for _, force := range []bool{false, true} {
		if _, err := ApplyWith(fields, ApplyOptions{Force: force}); err != nil {
			t.Fatal(err)
		}
	}
	want := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"}}`
	if fake.calls[0] != "apply-with force=false "+want || fake.calls[1] != "apply-with force=true "+want {
		t.Errorf("calls %q", fake.calls)
	}
}

func TestHostErrorsReachTheGuestAsTheyCame(t *testing.T) {
	fake := useFake(t)
	fake.fail = &HostError{Kind: Conflict, Message: "Widget demo/w1 changed"}
	if _, err := PatchStatus(widget, map[string]any{}); err != fake.fail {
		t.Errorf("PatchStatus: got %v", err)
	}
	if _, err := Get(widget); err != fake.fail {
		t.Errorf("Get: got %v", err)
	}
	if _, err := Delete(widget); err != fake.fail {
		t.Errorf("Delete: got %v", err)
	}
	if err := Enqueue(widget.Key(), 0); err != fake.fail {
		t.Errorf("Enqueue: got %v", err)
	}
}

func TestGetIsNilForAnObjectNotInTheCache(t *testing.T) {
	fake := useFake(t)
	fake.objects[widget] = `{"metadata":{"name":"w1"}}`
	found, err := Get(widget)
	if err != nil || found == nil || found.JSON() != fake.objects[widget] {
		t.Errorf("got %v, %v", found, err)
	}
	missing, err := Get(widget.Sibling("w2"))
	if err != nil || missing != nil {
		t.Errorf("got %v, %v", missing, err)
	}
}

func TestListDecodesEveryObjectAndNamesTheOneThatDoesNotFit(t *testing.T) {
	fake := useFake(t)
	fake.listed = []string{`{"data":{"k":"a"}}`, `{"data":{"k":"b"}}`}
	configMap := GVK{Version: "v1", Kind: "ConfigMap"}
	objects, err := List(configMap, "demo", "app=web")
	if err != nil || fake.calls[0] != `list ConfigMap "demo" "app=web"` {
		t.Fatalf("got %v, calls %q", err, fake.calls)
	}
	type configMapData struct {
		Data map[string]string `json:"data"`
	}
	decoded, err := DecodeAll[configMapData](objects)
	if err != nil || len(decoded) != 2 || decoded[1].Data["k"] != "b" {
		t.Errorf("got %+v, %v", decoded, err)
	}
	fake.listed = []string{`{"data":5}`}
	objects, _ = List(configMap, "", "")
	if _, err := DecodeAll[configMapData](objects); err == nil || err.Error()[:32] != "a ConfigMap from the cache does " {
		t.Errorf("got %v", err)
	}
}

func TestBestEffortEventsLogARefusalAndCarryOn(t *testing.T) {
	fake := useFake(t)
	fake.fail = &HostError{Kind: Unavailable, Message: "event rate exceeded"}
	WarningEvent(widget, "BackendFailed", "down")
	want := []string{
		"event 1 BackendFailed on Widget demo/w1: down",
		"log 3 could not record event BackendFailed on Widget demo/w1: unavailable: event rate exceeded",
	}
	if !reflect.DeepEqual(fake.calls, want) {
		t.Errorf("calls %q", fake.calls)
	}
	if err := RecordEvent(Event{Regarding: widget, Reason: "Synced"}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("RecordEvent must return the refusal, got %v", err)
	}
}

func TestEnqueueRoundsTheDelayUpToMilliseconds(t *testing.T) {
	fake := useFake(t)
	key := ObjectKey{Name: "cluster-scoped"}
	_ = Enqueue(key, 0)
	_ = Enqueue(key, 1500*time.Microsecond)
	_ = Enqueue(key, time.Minute)
	want := []string{"enqueue cluster-scoped 0 false", "enqueue cluster-scoped 2 true", "enqueue cluster-scoped 60000 true"}
	if !reflect.DeepEqual(fake.calls, want) {
		t.Errorf("calls %q", fake.calls)
	}
}

func TestLogLinesAreFormattedAndLevelled(t *testing.T) {
	fake := useFake(t)
	LogInfof("created %s (%d)", "demo/w1", 3)
	LogErrorf("100%% done")
	Log(LevelTrace, "raw %d")
	want := []string{"log 2 created demo/w1 (3)", "log 4 100% done", "log 0 raw %d"}
	if !reflect.DeepEqual(fake.calls, want) {
		t.Errorf("calls %q", fake.calls)
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
