//go:build !wasip1

package reconciler

// The fake host of native tests (`go test`): outside a component no host answers the SDK's
// calls, so a guest's map function, index function or whole reconcile that reads the cache or
// writes could not run in a test. Built natively only (the build constraint above): none of it
// is in a component.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Natively, the host is noFake until a test makes a fake the host, and again after it: every
// call panics naming UseFakeHost. (host.go's panic for a nil host is left as it was, so that
// the component, which holds it, does not change by a byte.)
func init() { hostCalls = noFake{} }

type noFake struct{}

func (noFake) panic() {
	panic("reconciler: no host to call: host calls work only inside the component (GOOS=wasip1); " +
		"in a native test, make a fake the host first: fake := reconciler.UseFakeHost(t, objects...)")
}

func (n noFake) get(ObjectRef) (string, bool, error)           { n.panic(); return "", false, nil }
func (n noFake) list(GVK, string, string) ([]string, error)    { n.panic(); return nil, nil }
func (n noFake) patchStatus(ObjectRef, string) (string, error) { n.panic(); return "", nil }
func (n noFake) apply(string) (string, error)                  { n.panic(); return "", nil }
func (n noFake) applyWith(string, bool) (string, error)        { n.panic(); return "", nil }
func (n noFake) delete(ObjectRef) (bool, error)                { n.panic(); return false, nil }
func (n noFake) recordEvent(Event) error                       { n.panic(); return nil }
func (n noFake) enqueue(ObjectKey, uint64, bool) error         { n.panic(); return nil }
func (n noFake) log(Level, string)                             { n.panic() }

// TB is what [UseFakeHost] needs of a test: *testing.T, *testing.B and *testing.F have it.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// FakeHost answers the SDK's host calls in a native test, from objects the test loads, and
// records every call; writes are never sent anywhere. [UseFakeHost] makes one.
//
// What it answers, kept simple on purpose (the offline runner, `reconciler-host reconcile` and
// `test`, runs the built component under its grant and is the full model):
//
//   - reads: [Get] finds an object by kind (group, version and kind), namespace and name;
//     [List] takes the objects of a kind in a namespace ("" = all) matching a label selector in
//     the host's syntax (`=`, `==`, `!=`, `key`, `!key`, `in (..)`, `notin (..)`; a bad one is
//     an [Invalid] [HostError] with the host's text), sorted by namespace, then name, as the
//     host's cache returns them.
//   - writes answer as a server would and change the fake's objects, so a later read sees them:
//     [PatchStatus] merges the patch's status into the object (an RFC 7386 merge patch;
//     [NotFound] when there is no such object); [Apply] and [ApplyWith] merge the object into
//     the stored one, or create it ([Invalid] without apiVersion, kind and metadata.name);
//     [Delete] removes it. [RecordEvent] and [Enqueue] are recorded only.
//   - every call, log lines included, is recorded in order: [FakeHost.Calls],
//     [FakeHost.Writes], [FakeHost.Logs]; [FakeHost.Fail] makes calls fail.
//   - not modelled: grants (every kind is readable, every write allowed), field ownership (an
//     ApplyWith without Force never conflicts), resourceVersion and generation, what the host
//     refuses inside a map function (writes) and an index function (every call but logging),
//     and the network backend and HTTP.
type FakeHost struct {
	t        TB
	objects  map[ObjectRef]map[string]any
	calls    []Call
	failures map[string]error
}

// Call is one call the guest made to the host, in the contract's terms: Name says which, and
// the fields that call carries are set.
type Call struct {
	// The contract's name: "get", "list", "patch-status", "apply", "apply-with", "delete",
	// "record-event", "enqueue" or "log".
	Name string
	// get, patch-status, delete
	Ref ObjectRef
	// list; Namespace "" for all namespaces, LabelSelector "" for none
	Kind                     GVK
	Namespace, LabelSelector string
	// patch-status: the merge patch (`{"status": ...}`); apply, apply-with: the object
	JSON string
	// apply-with
	Force bool
	// record-event
	Event Event
	// enqueue: 0 for now
	Key   ObjectKey
	After time.Duration
	// log
	Level   Level
	Message string
}

// callNames are the contract's names of the calls, in its order.
var callNames = []string{"get", "list", "patch-status", "apply", "apply-with", "delete", "record-event", "enqueue", "log"}

var levelNames = [...]string{LevelTrace: "trace", LevelDebug: "debug", LevelInfo: "info", LevelWarn: "warn", LevelError: "error"}

// String is one line, e.g. `get ConfigMap demo/a`, `list ConfigMap v1 in demo selecting app=web`,
// `patch-status Widget demo/w1 {"status":{...}}`, `apply-with force=false {...}`,
// `record-event Warning Failed on Widget demo/w1: down`, `enqueue demo/w1 after 2s`,
// `log warn: could not ...`.
func (c Call) String() string {
	switch c.Name {
	case "get", "delete":
		return c.Name + " " + c.Ref.String()
	case "list":
		line := "list " + describeKind(c.Kind) + " in "
		if c.Namespace == "" {
			line += "all namespaces"
		} else {
			line += c.Namespace
		}
		if c.LabelSelector != "" {
			line += " selecting " + c.LabelSelector
		}
		return line
	case "patch-status":
		return "patch-status " + c.Ref.String() + " " + c.JSON
	case "apply":
		return "apply " + c.JSON
	case "apply-with":
		return fmt.Sprintf("apply-with force=%t %s", c.Force, c.JSON)
	case "record-event":
		eventType := "Normal"
		if c.Event.Type == EventWarning {
			eventType = "Warning"
		}
		return fmt.Sprintf("record-event %s %s on %s: %s", eventType, c.Event.Reason, c.Event.Regarding, c.Event.Message)
	case "enqueue":
		if c.After > 0 {
			return fmt.Sprintf("enqueue %s after %s", c.Key, c.After)
		}
		return "enqueue " + c.Key.String()
	case "log":
		return "log " + levelNames[c.Level] + ": " + c.Message
	}
	return c.Name
}

// IsWrite reports whether the call asks the host to change something (or to record an event,
// or enqueue): every call but get, list and log.
func (c Call) IsWrite() bool { return c.Name != "get" && c.Name != "list" && c.Name != "log" }

// UseFakeHost makes a fake the host of the SDK's calls until t ends, loaded with objects: each
// the JSON text of a Kubernetes object (a string, []byte or [json.RawMessage]) or anything
// [json.Marshal] makes one of (a map, a struct of yours), with apiVersion, kind and
// metadata.name. A later object of the same kind, namespace and name replaces an earlier one.
//
//	fake := reconciler.UseFakeHost(t,
//		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"demo","name":"a"}}`)
//	keys, err := widgetsUsing(reconciler.ObjectFromJSON(configMap))
//	// fake.Calls(): what it read; fake.Writes(): what it would have changed
//
// The host is one per test binary: tests that use a fake must not call t.Parallel.
func UseFakeHost(t TB, objects ...any) *FakeHost {
	t.Helper()
	if _, inUse := hostCalls.(*FakeHost); inUse {
		t.Fatalf("reconciler.UseFakeHost: another fake host is in use: tests that use one must not run in parallel (t.Parallel)")
	}
	fake := &FakeHost{t: t, objects: map[ObjectRef]map[string]any{}, failures: map[string]error{}}
	for i, object := range objects {
		if err := fake.put(object); err != nil {
			t.Fatalf("reconciler.UseFakeHost: object %d: %v", i+1, err)
		}
	}
	hostCalls = fake
	t.Cleanup(func() { hostCalls = noFake{} })
	return fake
}

// put stores one object of a test.
func (f *FakeHost) put(object any) error {
	var text []byte
	switch o := object.(type) {
	case string:
		text = []byte(o)
	case []byte:
		text = o
	case json.RawMessage:
		text = o
	default:
		var err error
		if text, err = json.Marshal(object); err != nil {
			return err
		}
	}
	fields, ref, err := identify(text)
	if err != nil {
		return fmt.Errorf("%w: %s", err, text)
	}
	f.objects[ref] = fields
	return nil
}

// identify decodes an object and names it; an error when it is not a JSON object with
// apiVersion, kind and metadata.name.
func identify(text []byte) (map[string]any, ObjectRef, error) {
	object := &Object{text: string(text), what: "the object"}
	fields, err := object.Fields()
	if err != nil {
		return nil, ObjectRef{}, err
	}
	ref, ok := object.Ref()
	if !ok {
		return nil, ObjectRef{}, errors.New("an object needs apiVersion, kind and metadata.name")
	}
	return fields, ref, nil
}

// Calls is every call so far, in order.
func (f *FakeHost) Calls() []Call { return append([]Call(nil), f.calls...) }

// Writes is the calls so far that ask for a change ([Call.IsWrite]): what the guest would have
// done to the cluster.
func (f *FakeHost) Writes() []Call {
	var writes []Call
	for _, c := range f.calls {
		if c.IsWrite() {
			writes = append(writes, c)
		}
	}
	return writes
}

// Logs is the lines logged so far, in order, each `level: message` (`warn: could not ...`).
func (f *FakeHost) Logs() []string {
	var lines []string
	for _, c := range f.calls {
		if c.Name == "log" {
			lines = append(lines, levelNames[c.Level]+": "+c.Message)
		}
	}
	return lines
}

// Object is the object now, as the writes so far left it; nil when there is none.
func (f *FakeHost) Object(ref ObjectRef) *Object {
	fields, found := f.objects[ref]
	if !found {
		return nil
	}
	return &Object{text: encode(fields), ref: ref}
}

// Objects is every object now, sorted by kind (group, version, kind), namespace and name.
func (f *FakeHost) Objects() []*Object {
	refs := make([]ObjectRef, 0, len(f.objects))
	for ref := range f.objects {
		refs = append(refs, ref)
	}
	sort.Slice(refs, func(i, j int) bool {
		a, b := refs[i], refs[j]
		return strings.Join([]string{a.Kind.Group, a.Kind.Version, a.Kind.Kind, a.Namespace, a.Name}, "\x00") <
			strings.Join([]string{b.Kind.Group, b.Kind.Version, b.Kind.Kind, b.Namespace, b.Name}, "\x00")
	})
	objects := make([]*Object, len(refs))
	for i, ref := range refs {
		objects[i] = f.Object(ref)
	}
	return objects
}

// Request is the request the host would hand a reconcile of ref now: its object as the writes
// so far left it (gone when there is none), Deleting when it carries a
// metadata.deletionTimestamp, first attempt.
func (f *FakeHost) Request(ref ObjectRef) *Request {
	fields, found := f.objects[ref]
	if !found {
		return &Request{Ref: ref}
	}
	request := NewRequest(ref, encode(fields))
	metadata, _ := fields["metadata"].(map[string]any)
	request.Deleting = metadata["deletionTimestamp"] != nil
	return request
}

// Fail makes the calls named (the contract's names, as [Call].Name; none: every call but log)
// fail with err from now on; nil err makes them answer again. They are still recorded; a
// failed write changes nothing.
func (f *FakeHost) Fail(err error, calls ...string) {
	f.t.Helper()
	if len(calls) == 0 {
		calls = callNames[:len(callNames)-1]
	}
	for _, name := range calls {
		known := false
		for _, n := range callNames {
			known = known || n == name
		}
		if !known {
			f.t.Fatalf("FakeHost.Fail: no call is named %q (one of %q)", name, callNames)
		}
		if err == nil {
			delete(f.failures, name)
		} else {
			f.failures[name] = err
		}
	}
}

// record records call; the error [FakeHost.Fail] set for it, if any.
func (f *FakeHost) record(call Call) error {
	f.calls = append(f.calls, call)
	return f.failures[call.Name]
}

// encode is the JSON text of a stored object, without json.Marshal's HTML escaping.
func encode(value any) string {
	var text bytes.Buffer
	encoder := json.NewEncoder(&text)
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(value); err != nil {
		panic("reconciler: the fake host's object does not encode: " + err.Error()) // decoded from JSON: cannot happen
	}
	return strings.TrimSuffix(text.String(), "\n")
}

// mergePatch applies an RFC 7386 JSON merge patch, as the offline runner writes patches and
// applies, and returns the result; target's maps are changed in place.
func mergePatch(target, patch any) any {
	fields, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	merged, ok := target.(map[string]any)
	if !ok || merged == nil {
		merged = map[string]any{}
	}
	for key, value := range fields {
		if value == nil {
			delete(merged, key)
		} else {
			merged[key] = mergePatch(merged[key], value)
		}
	}
	return merged
}

// labelsOf is an object's labels; none that are not strings.
func labelsOf(fields map[string]any) map[string]string {
	metadata, _ := fields["metadata"].(map[string]any)
	raw, _ := metadata["labels"].(map[string]any)
	labels := map[string]string{}
	for key, value := range raw {
		if s, ok := value.(string); ok {
			labels[key] = s
		}
	}
	return labels
}

// The contract's imports (the interface in host.go), answered.

func (f *FakeHost) get(ref ObjectRef) (string, bool, error) {
	if err := f.record(Call{Name: "get", Ref: ref}); err != nil {
		return "", false, err
	}
	fields, found := f.objects[ref]
	if !found {
		return "", false, nil
	}
	return encode(fields), true, nil
}

func (f *FakeHost) list(kind GVK, namespace, labelSelector string) ([]string, error) {
	if err := f.record(Call{Name: "list", Kind: kind, Namespace: namespace, LabelSelector: labelSelector}); err != nil {
		return nil, err
	}
	selector, err := parseSelector(labelSelector)
	if err != nil {
		return nil, &HostError{Kind: Invalid, Message: "label-selector: " + err.Error()}
	}
	var refs []ObjectRef
	for ref, fields := range f.objects {
		if ref.Kind == kind && (namespace == "" || ref.Namespace == namespace) && selectorMatches(selector, labelsOf(fields)) {
			refs = append(refs, ref)
		}
	}
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].Namespace != refs[j].Namespace {
			return refs[i].Namespace < refs[j].Namespace
		}
		return refs[i].Name < refs[j].Name
	})
	texts := make([]string, len(refs))
	for i, ref := range refs {
		texts[i] = encode(f.objects[ref])
	}
	return texts, nil
}

func (f *FakeHost) patchStatus(ref ObjectRef, patch string) (string, error) {
	if err := f.record(Call{Name: "patch-status", Ref: ref, JSON: patch}); err != nil {
		return "", err
	}
	var fields map[string]any
	if err := decode(patch, &fields); err != nil {
		return "", &HostError{Kind: Invalid, Message: fmt.Sprintf("the status patch of %s is not a JSON object: %v", ref, err)}
	}
	object, found := f.objects[ref]
	if !found {
		return "", &HostError{Kind: NotFound, Message: ref.String() + " is not among the fake host's objects"}
	}
	// Only status is written through the status subresource, as on a real server.
	if status, ok := fields["status"]; ok {
		mergePatch(object, map[string]any{"status": status})
	}
	return encode(object), nil
}

func (f *FakeHost) apply(object string) (string, error) {
	if err := f.record(Call{Name: "apply", JSON: object}); err != nil {
		return "", err
	}
	return f.merge(object)
}

func (f *FakeHost) applyWith(object string, force bool) (string, error) {
	if err := f.record(Call{Name: "apply-with", JSON: object, Force: force}); err != nil {
		return "", err
	}
	return f.merge(object)
}

// merge writes an applied object into the stored one as a merge patch, as the offline runner
// does: field ownership is not modelled.
func (f *FakeHost) merge(object string) (string, error) {
	fields, ref, err := identify([]byte(object))
	if err != nil {
		return "", &HostError{Kind: Invalid, Message: "the applied object: " + err.Error()}
	}
	merged := mergePatch(f.objects[ref], fields).(map[string]any)
	f.objects[ref] = merged
	return encode(merged), nil
}

func (f *FakeHost) delete(ref ObjectRef) (bool, error) {
	if err := f.record(Call{Name: "delete", Ref: ref}); err != nil {
		return false, err
	}
	_, existed := f.objects[ref]
	delete(f.objects, ref)
	return existed, nil
}

func (f *FakeHost) recordEvent(event Event) error {
	return f.record(Call{Name: "record-event", Event: event})
}

func (f *FakeHost) enqueue(key ObjectKey, afterMs uint64, delayed bool) error {
	call := Call{Name: "enqueue", Key: key}
	if delayed {
		call.After = time.Duration(afterMs) * time.Millisecond
	}
	return f.record(call)
}

func (f *FakeHost) log(level Level, message string) {
	f.calls = append(f.calls, Call{Name: "log", Level: level, Message: message})
}
