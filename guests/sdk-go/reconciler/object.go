package reconciler

import (
	"encoding/json"
	"strings"
)

// GVK is a group, version and kind. The core group is "".
type GVK struct {
	Group   string
	Version string
	Kind    string
}

// GVKOf is the kind an object declares by its apiVersion (`group/version`, or `version` alone
// for the core group) and kind.
func GVKOf(apiVersion, kind string) GVK {
	group, version, found := strings.Cut(apiVersion, "/")
	if !found {
		return GVK{Version: apiVersion, Kind: kind}
	}
	return GVK{Group: group, Version: version, Kind: kind}
}

// APIVersion is the apiVersion an object of this kind carries.
func (k GVK) APIVersion() string {
	if k.Group == "" {
		return k.Version
	}
	return k.Group + "/" + k.Version
}

// ObjectRef names one object. Namespace is "" for cluster-scoped kinds.
type ObjectRef struct {
	Kind      GVK
	Namespace string
	Name      string
}

// String is `Kind namespace/name` (`Kind name` when cluster-scoped), as in log lines.
func (r ObjectRef) String() string {
	return r.Kind.Kind + " " + r.Key().String()
}

// Key is the object's queue key.
func (r ObjectRef) Key() ObjectKey {
	return ObjectKey{Namespace: r.Namespace, Name: r.Name}
}

// Sibling is another object of the same kind and namespace.
func (r ObjectRef) Sibling(name string) ObjectRef {
	r.Name = name
	return r
}

// ObjectKey is the namespace and name of a primary object: the unit of work of the queue.
// Namespace is "" for cluster-scoped primaries.
type ObjectKey struct {
	Namespace string
	Name      string
}

// String is `namespace/name`, or `name` when cluster-scoped.
func (k ObjectKey) String() string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

// Object is a Kubernetes object as the host passed it: JSON text, decoded only when asked.
//
// Numbers decoded into `any` (Fields, or `any` and map fields of a struct) are [json.Number],
// exact as the API server wrote them (a generation or a quantity does not pass through
// float64); decode into typed fields (int64, float64) to get numbers.
type Object struct {
	text string
	// What the object is, for error messages: what, or else ref.
	what string
	ref  ObjectRef

	parsed bool
	fields map[string]any
	err    error
}

// ObjectFromJSON is an object from its JSON text, e.g. to test a reconcile natively.
func ObjectFromJSON(text string) *Object {
	return &Object{text: text, what: "the object"}
}

// JSON is the object's text, exactly as the host passed it.
func (o *Object) JSON() string { return o.text }

// Decode decodes the object into a struct (or map) of the guest's, as [json.Unmarshal] does.
// A mismatch is a [Permanent] error: the same object fails the same way on every retry, and
// its next change triggers a reconcile anyway.
func (o *Object) Decode(into any) error {
	if err := decode(o.text, into); err != nil {
		return Permanentf("%s does not decode: %w", o.describe(), err)
	}
	return nil
}

// Fields is the object decoded as a JSON object, decoded on the first call and shared by
// later ones (do not modify it if another part of the guest reads it too). An error is
// [Permanent], as for Decode.
func (o *Object) Fields() (map[string]any, error) {
	if !o.parsed {
		o.parsed = true
		if err := decode(o.text, &o.fields); err != nil {
			o.err = Permanentf("%s is not a JSON object: %w", o.describe(), err)
		} else if o.fields == nil {
			o.err = Permanentf("%s is not a JSON object: null", o.describe())
		}
	}
	return o.fields, o.err
}

// Ref names the object from its apiVersion, kind and metadata.namespace/name, e.g. one
// [List] returned; false when any of those but the namespace is missing.
func (o *Object) Ref() (ObjectRef, bool) {
	fields, err := o.Fields()
	if err != nil {
		return ObjectRef{}, false
	}
	apiVersion, okVersion := fields["apiVersion"].(string)
	kind, okKind := fields["kind"].(string)
	metadata, _ := fields["metadata"].(map[string]any)
	name, okName := metadata["name"].(string)
	if !okVersion || !okKind || !okName {
		return ObjectRef{}, false
	}
	namespace, _ := metadata["namespace"].(string)
	return ObjectRef{Kind: GVKOf(apiVersion, kind), Namespace: namespace, Name: name}, true
}

func (o *Object) describe() string {
	if o.what != "" {
		return o.what
	}
	return o.ref.String()
}

// decode is json.Unmarshal with numbers in `any` kept as json.Number.
func decode(text string, into any) error {
	decoder := json.NewDecoder(strings.NewReader(text))
	decoder.UseNumber()
	return decoder.Decode(into)
}

// Request is one reconcile: the key's object as the cache holds it, and why it is asked.
type Request struct {
	// The key's object; its kind is the manifest's primary kind.
	Ref ObjectRef
	// The cached object, nil when it is gone.
	Object *Object
	// The object has a deletion timestamp: clean up external state now.
	Deleting bool
	// 0 for the first try of this key since its last success, then 1, 2, ...
	Attempt uint32
}

// NewRequest is a request for ref whose object is this JSON text, e.g. to test a reconcile
// natively; a request for an object that is gone is `&Request{Ref: ref}`.
func NewRequest(ref ObjectRef, object string) *Request {
	return &Request{Ref: ref, Object: &Object{text: object, ref: ref}}
}

// Gone reports whether the object no longer exists (Object is nil).
func (r *Request) Gone() bool { return r.Object == nil }

// Key is the queue key of the request's object.
func (r *Request) Key() ObjectKey { return r.Ref.Key() }
