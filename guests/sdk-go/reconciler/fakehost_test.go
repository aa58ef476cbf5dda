package reconciler

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

var (
	configMapV1 = GVK{Version: "v1", Kind: "ConfigMap"}
	secretV1    = GVK{Version: "v1", Kind: "Secret"}
)

func configMapAt(namespace, name string) ObjectRef {
	return ObjectRef{Kind: configMapV1, Namespace: namespace, Name: name}
}

// cluster is a fake with three ConfigMaps in two namespaces, loaded out of order and in each
// form UseFakeHost takes, a Secret beside one of them and a Namespace.
func cluster(t *testing.T) *FakeHost {
	configMap := func(namespace, name string, labels map[string]string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"namespace": namespace, "name": name, "labels": labels},
			"data":     map[string]any{"name": name}}
	}
	return UseFakeHost(t,
		configMap("b", "web", map[string]string{"app": "web", "tier": "front"}),
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"a","name":"db","labels":{"app":"db"}},"data":{"name":"db"}}`,
		json.RawMessage(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"a","name":"web","labels":{"app":"web"}},"data":{"name":"web"}}`),
		[]byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"namespace":"a","name":"web"}}`),
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}`,
	)
}

// names is `namespace/name` of each object.
func names(t *testing.T, objects []*Object) []string {
	t.Helper()
	var names []string
	for _, object := range objects {
		ref, ok := object.Ref()
		if !ok {
			t.Fatalf("%s names no object", object.JSON())
		}
		names = append(names, ref.Namespace+"/"+ref.Name)
	}
	return names
}

func TestTheFakeGetsAnObjectByKindNamespaceAndName(t *testing.T) {
	fake := cluster(t)
	found, err := Get(configMapAt("a", "web"))
	var data struct {
		Data map[string]string `json:"data"`
	}
	if err != nil || found == nil || found.Decode(&data) != nil || data.Data["name"] != "web" {
		t.Fatalf("got %v, %v", found, err)
	}
	for _, absent := range []ObjectRef{
		configMapAt("a", "nothing"),
		configMapAt("b", "db"),
		{Kind: GVK{Version: "v2", Kind: "ConfigMap"}, Namespace: "a", Name: "web"},
	} {
		if got, err := Get(absent); got != nil || err != nil {
			t.Errorf("%v: got %v, %v", absent, got, err)
		}
	}
	if secret, _ := Get(ObjectRef{Kind: secretV1, Namespace: "a", Name: "web"}); secret == nil || !strings.Contains(secret.JSON(), `"kind":"Secret"`) {
		t.Errorf("the Secret beside the ConfigMap: %v", secret)
	}
	if namespace, _ := Get(ObjectRef{Kind: GVK{Version: "v1", Kind: "Namespace"}, Name: "a"}); namespace == nil {
		t.Error("a cluster-scoped object is found without a namespace")
	}
	if got := lines(fake)[0]; got != "get ConfigMap a/web" {
		t.Errorf("call %q", got)
	}
}

func TestTheFakeListsAKindInANamespaceSortedByNamespaceThenName(t *testing.T) {
	cluster(t)
	for _, c := range []struct {
		namespace string
		want      []string
	}{
		{"", []string{"a/db", "a/web", "b/web"}},
		{"a", []string{"a/db", "a/web"}},
		{"c", nil},
	} {
		objects, err := List(configMapV1, c.namespace, "")
		if got := names(t, objects); err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("namespace %q: got %q, %v, want %q", c.namespace, got, err, c.want)
		}
	}
}

func TestTheFakeSelectsByLabelsAsTheHostDoes(t *testing.T) {
	cluster(t)
	for selector, want := range map[string][]string{
		"app=web":             {"a/web", "b/web"},
		"app==web,tier=front": {"b/web"},
		"app!=web":            {"a/db"},
		"tier":                {"b/web"},
		"!tier":               {"a/db", "a/web"},
		"app in (db, web)":    {"a/db", "a/web", "b/web"},
		"tier notin (front)":  {"a/db", "a/web"},
		"app=cache":           nil,
	} {
		objects, err := List(configMapV1, "", selector)
		if got := names(t, objects); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: got %q, %v, want %q", selector, got, err, want)
		}
	}
}

func TestABadSelectorIsInvalidWithTheHostsText(t *testing.T) {
	cluster(t)
	_, err := List(configMapV1, "", "app=web,")
	want := `invalid: label-selector: invalid label selector "app=web," at byte 8: expected a label key, found the end of the selector`
	if e, ok := AsHostError(err); !ok || e.Kind != Invalid || err.Error() != want {
		t.Errorf("got %v", err)
	}
}

func TestWritesAreRecordedAndChangeWhatLaterReadsSee(t *testing.T) {
	fake := cluster(t)
	returned, err := PatchStatus(configMapAt("a", "web"), map[string]any{"phase": "Ready", "n": 1})
	if err != nil || !strings.Contains(returned.JSON(), `"status":{"n":1,"phase":"Ready"}`) {
		t.Fatalf("got %v, %v", returned, err)
	}
	if _, err := PatchStatus(configMapAt("a", "web"), map[string]any{"n": nil}); err != nil {
		t.Fatal(err)
	}
	read, _ := Get(configMapAt("a", "web"))
	if !strings.Contains(read.JSON(), `"status":{"phase":"Ready"}`) || !strings.Contains(read.JSON(), `"data":{"name":"web"}`) {
		t.Errorf("after the patches: %s", read.JSON())
	}
	applied, err := Apply(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": "a", "name": "web", "annotations": map[string]any{"k": "v"}}})
	if err != nil || !strings.Contains(applied.JSON(), `"annotations":{"k":"v"}`) || !strings.Contains(applied.JSON(), `"data":{"name":"web"}`) {
		t.Errorf("an apply merges into the object: %v, %v", applied, err)
	}
	created := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"new","namespace":"c"}}`
	if _, err := ApplyWith(json.RawMessage(created), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := fake.Object(configMapAt("c", "new")); got == nil || got.JSON() != created {
		t.Errorf("created: %v", got)
	}
	if existed, err := Delete(configMapAt("a", "db")); !existed || err != nil {
		t.Errorf("delete: %t, %v", existed, err)
	}
	if existed, err := Delete(configMapAt("a", "db")); existed || err != nil {
		t.Errorf("a second delete: %t, %v", existed, err)
	}
	NormalEvent(configMapAt("a", "web"), "Synced", "done")
	_ = Enqueue(ObjectKey{Namespace: "a", Name: "web"}, 2*time.Second)

	if got, want := names(t, fake.Objects()), []string{"a/web", "b/web", "c/new", "/a", "a/web"}; !reflect.DeepEqual(got, want) {
		t.Errorf("objects %q, want %q (by kind: ConfigMap, Namespace, Secret)", got, want)
	}
	var writes []string
	for _, call := range fake.Writes() {
		writes = append(writes, call.String())
	}
	want := []string{
		`patch-status ConfigMap a/web {"status":{"n":1,"phase":"Ready"}}`,
		`patch-status ConfigMap a/web {"status":{"n":null}}`,
		`apply {"apiVersion":"v1","kind":"ConfigMap","metadata":{"annotations":{"k":"v"},"name":"web","namespace":"a"}}`,
		`apply-with force=false ` + created,
		`delete ConfigMap a/db`,
		`delete ConfigMap a/db`,
		`record-event Normal Synced on ConfigMap a/web: done`,
		`enqueue a/web after 2s`,
	}
	if !reflect.DeepEqual(writes, want) {
		t.Errorf("writes\n%s\nwant\n%s", strings.Join(writes, "\n"), strings.Join(want, "\n"))
	}
	if len(fake.Calls()) != len(want)+1 {
		t.Errorf("calls %q: the writes and the one read", lines(fake))
	}
	if event := fake.Writes()[6].Event; event.Type != EventNormal || event.Regarding != configMapAt("a", "web") {
		t.Errorf("event %+v", event)
	}
}

func TestWritesTheServerWouldRefuseAreRefused(t *testing.T) {
	cluster(t)
	if _, err := PatchStatus(configMapAt("a", "gone"), map[string]any{}); !strings.HasPrefix(fmt.Sprint(err), "not-found: ConfigMap a/gone") {
		t.Errorf("a status patch of nothing: %v", err)
	}
	if _, err := Apply(map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}); !strings.HasPrefix(fmt.Sprint(err), "invalid: the applied object") {
		t.Errorf("an apply without a name: %v", err)
	}
}

func TestAFailingCallIsRecordedAndChangesNothing(t *testing.T) {
	fake := cluster(t)
	conflict := &HostError{Kind: Conflict, Message: "owned by kubectl"}
	fake.Fail(conflict, "apply-with")
	_, err := ApplyWith(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": "a", "name": "web"}, "data": map[string]any{"x": "y"}}, ApplyOptions{})
	if err != conflict {
		t.Errorf("got %v", err)
	}
	if strings.Contains(fake.Object(configMapAt("a", "web")).JSON(), `"x"`) {
		t.Error("a failed apply changed the object")
	}
	if _, err := Get(configMapAt("a", "web")); err != nil {
		t.Errorf("other calls answer: %v", err)
	}
	fake.Fail(nil, "apply-with")
	if _, err := ApplyWith(json.RawMessage(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`), ApplyOptions{}); err != nil {
		t.Errorf("after Fail(nil): %v", err)
	}
	fake.Fail(&HostError{Kind: Unavailable, Message: "down"})
	if _, err := List(configMapV1, "", ""); err == nil {
		t.Error("Fail without names fails every call")
	}
	LogInfof("still logs")
	if got := fake.Logs(); !reflect.DeepEqual(got, []string{"info: still logs"}) {
		t.Errorf("logs %q", got)
	}
	if len(fake.Calls()) != 5 {
		t.Errorf("calls %q", lines(fake))
	}
}

func TestARequestCarriesTheObjectAsTheWritesLeftIt(t *testing.T) {
	fake := cluster(t)
	_, _ = PatchStatus(configMapAt("a", "web"), map[string]any{"seen": true})
	req := fake.Request(configMapAt("a", "web"))
	if req.Ref != configMapAt("a", "web") || req.Gone() || req.Deleting || !strings.Contains(req.Object.JSON(), `"seen":true`) {
		t.Errorf("request %+v, object %s", req, req.Object.JSON())
	}
	if gone := fake.Request(configMapAt("a", "gone")); !gone.Gone() {
		t.Errorf("a request for nothing: %+v", gone)
	}
	_, _ = Apply(json.RawMessage(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"a","name":"web","deletionTimestamp":"2026-01-02T03:04:05Z"}}`))
	if !fake.Request(configMapAt("a", "web")).Deleting {
		t.Error("an object with a deletion timestamp is being deleted")
	}
}

// recordingTB is a TB that records what would fail the test.
type recordingTB struct {
	cleanups []func()
	fatal    string
}

func (r *recordingTB) Helper()          {}
func (r *recordingTB) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recordingTB) Fatalf(f string, args ...any) {
	if r.fatal == "" {
		r.fatal = fmt.Sprintf(f, args...)
	}
}

func (r *recordingTB) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func TestTheTestsOwnMistakesFailItSayingWhat(t *testing.T) {
	tb := &recordingTB{}
	UseFakeHost(tb, `{"apiVersion":"v1","kind":"ConfigMap"}`)
	tb.end()
	if !strings.Contains(tb.fatal, "object 1: an object needs apiVersion, kind and metadata.name") {
		t.Errorf("an object without a name: %q", tb.fatal)
	}

	tb = &recordingTB{}
	UseFakeHost(tb).Fail(ErrConflict, "patch")
	tb.end()
	if !strings.Contains(tb.fatal, `no call is named "patch"`) {
		t.Errorf("an unknown call: %q", tb.fatal)
	}

	tb = &recordingTB{}
	UseFakeHost(t)
	UseFakeHost(tb)
	if !strings.Contains(tb.fatal, "must not run in parallel") {
		t.Errorf("two fakes at once: %q", tb.fatal)
	}
}

func TestTheFakeIsTheHostUntilTheTestEnds(t *testing.T) {
	tb := &recordingTB{}
	fake := UseFakeHost(tb)
	Log(LevelInfo, "during")
	tb.end()
	if len(fake.Calls()) != 1 {
		t.Errorf("calls %q", lines(fake))
	}
	if !strings.Contains(panicOf(func() { Log(LevelInfo, "after") }), "reconciler.UseFakeHost(t, objects...)") || len(fake.Calls()) != 1 {
		t.Error("the fake outlived its test, or the panic does not name it")
	}
}

// widgetsUsing is a guest's map function, the one docs/guests/go.md tests: the web Widgets of
// a ConfigMap's namespace whose spec.configMap names it.
func widgetsUsing(configMap *Object) ([]ObjectKey, error) {
	ref, _ := configMap.Ref()
	widgets, err := List(GVK{Group: "example.com", Version: "v1", Kind: "Widget"}, ref.Namespace, "app=web")
	if err != nil {
		return nil, err
	}
	var keys []ObjectKey
	for _, w := range widgets {
		var widget struct {
			Metadata struct{ Namespace, Name string } `json:"metadata"`
			Spec     struct{ ConfigMap string }       `json:"spec"`
		}
		if err := w.Decode(&widget); err != nil {
			return nil, err
		}
		if widget.Spec.ConfigMap == ref.Name {
			keys = append(keys, ObjectKey{Namespace: widget.Metadata.Namespace, Name: widget.Metadata.Name})
		}
	}
	return keys, nil
}

func TestAMapFunctionThatListsTheCacheRunsAgainstTheFake(t *testing.T) {
	fake := UseFakeHost(t,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"demo","name":"b","labels":{"app":"web"}},"spec":{"configMap":"settings"}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"demo","name":"a","labels":{"app":"web"}},"spec":{"configMap":"settings"}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"demo","name":"db","labels":{"app":"db"}},"spec":{"configMap":"settings"}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"other","name":"c","labels":{"app":"web"}},"spec":{"configMap":"settings"}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"demo","name":"d","labels":{"app":"web"}},"spec":{"configMap":"other"}}`,
	)
	keys, err := widgetsUsing(ObjectFromJSON(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"demo","name":"settings"}}`))
	want := []ObjectKey{{Namespace: "demo", Name: "a"}, {Namespace: "demo", Name: "b"}}
	if err != nil || !reflect.DeepEqual(keys, want) {
		t.Errorf("keys %v, %v, want %v", keys, err, want)
	}
	if got := lines(fake); !reflect.DeepEqual(got, []string{"list Widget example.com/v1 in demo selecting app=web"}) {
		t.Errorf("calls %q", got)
	}
}
