package export_reconciler_api_reconciler

// Native tests (go test, against the SDK's fake host); guests/sdk-go/test.sh runs them with the
// SDK copied beside this module, as the build does.

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"wit_component/reconciler"
)

var web = reconciler.ObjectRef{Kind: deploymentKind, Namespace: "apps", Name: "web"}

// cluster is a fake host holding the Deployment apps/web listing list, the ConfigMaps a and b
// of its namespace, and an a elsewhere, which it must not read.
func cluster(t *testing.T, list string) *reconciler.FakeHost {
	configMap := func(namespace, name, value string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"namespace": namespace, "name": name},
			"data":     map[string]any{"k": value}}
	}
	return reconciler.UseFakeHost(t,
		map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"namespace": "apps", "name": "web",
				"annotations": map[string]any{listAnnotation: list}},
			"spec": map[string]any{"replicas": 2}},
		configMap("apps", "a", "1"),
		configMap("apps", "b", "2"),
		configMap("other", "a", "elsewhere"),
	)
}

// condition is the guest's condition a status patch writes, as `status reason: message`.
func condition(t *testing.T, call reconciler.Call) string {
	t.Helper()
	var patch struct {
		Status struct {
			Conditions []map[string]string `json:"conditions"`
		} `json:"status"`
	}
	if call.Name != "patch-status" || call.Ref != web || json.Unmarshal([]byte(call.JSON), &patch) != nil ||
		len(patch.Status.Conditions) != 1 || patch.Status.Conditions[0]["type"] != conditionType {
		t.Fatalf("not a patch of the one condition of %s: %s", web, call)
	}
	c := patch.Status.Conditions[0]
	return c["status"] + " " + c["reason"] + ": " + c["message"]
}

func TestAReconcileAppliesTheHashOfTheListedConfigMapsAndSaysSo(t *testing.T) {
	fake := cluster(t, "b, a")
	if _, err := reconcile(fake.Request(web)); err != nil {
		t.Fatal(err)
	}
	hash := Hash([]string{"a", "b"}, []map[string]any{
		{"data": map[string]any{"k": "1"}, "binaryData": nil},
		{"data": map[string]any{"k": "2"}, "binaryData": nil},
	})
	writes := fake.Writes()
	want := `apply-with force=false {"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"apps"},` +
		`"spec":{"template":{"metadata":{"annotations":{"reloader.example/config-hash":"` + hash + `"}}}}}`
	if len(writes) != 2 || writes[0].String() != want {
		t.Fatalf("writes %q, want first %q", writes, want)
	}
	if got := condition(t, writes[1]); got != "True Hashed: hash of ConfigMap a, b" {
		t.Errorf("condition %q", got)
	}
	// The apply merged into the Deployment: the next reconcile finds the hash and the condition
	// in place and writes nothing.
	if !strings.Contains(fake.Object(web).JSON(), `"replicas":2`) {
		t.Errorf("the apply took a field it does not manage: %s", fake.Object(web).JSON())
	}
	if _, err := reconcile(fake.Request(web)); err != nil || len(fake.Writes()) != 2 {
		t.Errorf("a second reconcile: %v, writes %q", err, fake.Writes())
	}
}

func TestAMissingConfigMapKeepsTheHashAndWarns(t *testing.T) {
	fake := cluster(t, "a,missing")
	if _, err := reconcile(fake.Request(web)); err != nil {
		t.Fatal(err)
	}
	writes := fake.Writes()
	message := "ConfigMap missing not found in namespace apps; the last hash is kept"
	if len(writes) != 2 || writes[0].String() != "record-event Warning ConfigMapNotFound on Deployment apps/web: "+message {
		t.Fatalf("writes %q: a warning and the condition, no apply", writes)
	}
	if got := condition(t, writes[1]); got != "False ConfigMapNotFound: "+message {
		t.Errorf("condition %q", got)
	}
}

func TestAHashAnnotationAnotherManagerOwnsIsARetriedConflictThatNamesIt(t *testing.T) {
	fake := cluster(t, "a")
	fake.Fail(&reconciler.HostError{Kind: reconciler.Conflict, Message: `conflict with "kubectl"`}, "apply-with")
	_, err := reconcile(fake.Request(web))
	if e, ok := reconciler.AsHostError(err); !ok || e.Kind != reconciler.Conflict {
		t.Fatalf("got %v, want the conflict, retried", err)
	}
	writes := fake.Writes()
	if len(writes) != 3 || writes[0].Name != "apply-with" || writes[1].Event.Reason != "HashConflict" {
		t.Fatalf("writes %q", writes)
	}
	if got := condition(t, writes[2]); !strings.HasPrefix(got, "False HashConflict: ") || !strings.Contains(got, "kubectl") {
		t.Errorf("condition %q", got)
	}
}

func TestADeploymentIsIndexedByTheConfigMapsItListsAndABadListByNone(t *testing.T) {
	deployment := func(annotations string) *reconciler.Object {
		return reconciler.ObjectFromJSON(`{"metadata":{"name":"web","namespace":"apps","annotations":` + annotations + `}}`)
	}
	for annotations, want := range map[string][]string{
		`{"reloader.example/configmaps":"b, a,b"}`: {"a", "b"},
		`{"reloader.example/configmaps":"a,,b"}`:   nil,
		`{"other":"a"}`:                            nil,
	} {
		if got, err := ConfigMapsOf(deployment(annotations)); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %q, %v, want %q", annotations, got, err, want)
		}
	}
	if got, err := ConfigMapsOf(reconciler.ObjectFromJSON("not json")); got != nil || err != nil {
		t.Errorf("not JSON: got %q, %v", got, err)
	}
}
