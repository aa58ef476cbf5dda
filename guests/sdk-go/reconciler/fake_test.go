package reconciler

import (
	"fmt"
	"testing"
)

// fakeHost records every host call as a line of text and answers from its fields.
type fakeHost struct {
	calls   []string
	objects map[ObjectRef]string // what get finds
	listed  []string             // what list returns
	fail    error                // when set, every call but log fails with it
}

// useFake makes a fake the host for one test.
func useFake(t *testing.T) *fakeHost {
	t.Helper()
	fake := &fakeHost{objects: map[ObjectRef]string{}}
	hostCalls = fake
	t.Cleanup(func() { hostCalls = nil })
	return fake
}

func (f *fakeHost) record(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeHost) get(ref ObjectRef) (string, bool, error) {
	f.record("get %s", ref)
	if f.fail != nil {
		return "", false, f.fail
	}
	object, found := f.objects[ref]
	return object, found, nil
}

func (f *fakeHost) list(kind GVK, namespace, labelSelector string) ([]string, error) {
	f.record("list %s %q %q", kind.Kind, namespace, labelSelector)
	return f.listed, f.fail
}

func (f *fakeHost) patchStatus(ref ObjectRef, patch string) (string, error) {
	f.record("patch-status %s %s", ref, patch)
	if f.fail != nil {
		return "", f.fail
	}
	return `{"kind":"Widget","status":{"greeting":"hi"}}`, nil
}

func (f *fakeHost) apply(object string) (string, error) {
	f.record("apply %s", object)
	if f.fail != nil {
		return "", f.fail
	}
	return object, nil
}

func (f *fakeHost) applyWith(object string, force bool) (string, error) {
	f.record("apply-with force=%t %s", force, object)
	if f.fail != nil {
		return "", f.fail
	}
	return object, nil
}

func (f *fakeHost) delete(ref ObjectRef) (bool, error) {
	f.record("delete %s", ref)
	return f.fail == nil, f.fail
}

func (f *fakeHost) recordEvent(event Event) error {
	f.record("event %d %s on %s: %s", event.Type, event.Reason, event.Regarding, event.Message)
	return f.fail
}

func (f *fakeHost) enqueue(key ObjectKey, afterMs uint64, delayed bool) error {
	f.record("enqueue %s %d %t", key, afterMs, delayed)
	return f.fail
}

func (f *fakeHost) log(level Level, message string) {
	f.record("log %d %s", level, message)
}

var widget = ObjectRef{Kind: GVK{Group: "test.reconciler.dev", Version: "v1", Kind: "Widget"}, Namespace: "demo", Name: "w1"}
