package networkbackend

import (
	"reflect"
	"testing"

	"wit_component/reconciler"
)

type fakeBackend struct {
	networks map[string]Status
	calls    []string
	fail     error
}

func (f *fakeBackend) get(id string) (Status, bool, error) {
	f.calls = append(f.calls, "get "+id)
	status, found := f.networks[id]
	return status, found, f.fail
}

func (f *fakeBackend) ensure(spec Spec) (Status, error) {
	f.calls = append(f.calls, "ensure "+spec.ID+" "+spec.CIDR+" "+spec.Gateway)
	if f.fail != nil {
		return Status{}, f.fail
	}
	status := Status{ID: spec.ID, CIDR: spec.CIDR, Gateway: spec.Gateway, InterfaceName: "rh-1", Up: true}
	f.networks[spec.ID] = status
	return status, nil
}

func (f *fakeBackend) delete(id string) (bool, error) {
	f.calls = append(f.calls, "delete "+id)
	_, found := f.networks[id]
	delete(f.networks, id)
	return found, f.fail
}

func useFake(t *testing.T) *fakeBackend {
	fake := &fakeBackend{networks: map[string]Status{}}
	hostCalls = fake
	t.Cleanup(func() { hostCalls = nil })
	return fake
}

func TestANetworkIsNilUntilEnsuredAndGoneOnceDeleted(t *testing.T) {
	fake := useFake(t)
	if got, err := Get("demo/a"); got != nil || err != nil {
		t.Errorf("before: %+v, %v", got, err)
	}
	ensured, err := Ensure(Spec{ID: "demo/a", CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"})
	if err != nil || ensured.InterfaceName != "rh-1" {
		t.Errorf("ensure: %+v, %v", ensured, err)
	}
	if got, _ := Get("demo/a"); got == nil || *got != ensured {
		t.Errorf("after: %+v", got)
	}
	if existed, _ := Delete("demo/a"); !existed {
		t.Error("delete must report the network existed")
	}
	if existed, _ := Delete("demo/a"); existed {
		t.Error("a second delete finds nothing")
	}
	want := []string{"get demo/a", "ensure demo/a 10.0.0.0/24 10.0.0.1", "get demo/a", "delete demo/a", "delete demo/a"}
	if !reflect.DeepEqual(fake.calls, want) {
		t.Errorf("calls %q", fake.calls)
	}
}

func TestBackendFailuresAreHostErrors(t *testing.T) {
	fake := useFake(t)
	fake.fail = &reconciler.HostError{Kind: reconciler.Invalid, Message: "spec: overlaps demo/b"}
	if got, err := Get("demo/a"); got != nil || err != fake.fail {
		t.Errorf("get: %+v, %v", got, err)
	}
	if _, err := Ensure(Spec{ID: "demo/a"}); err != fake.fail {
		t.Errorf("ensure: %v", err)
	}
}
