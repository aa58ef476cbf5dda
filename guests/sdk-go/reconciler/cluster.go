package reconciler

import "encoding/json"

// Writes to the API server, with the guest's name as field manager. Each call is one request
// to the API server (a round trip, not a cache read). After a write the host's cache shows the
// returned object at once, so a following Get reads the guest's own write.
//
// What a write returns is the object as the API server returned it when the guest may read
// its kind, otherwise only its identity (apiVersion, kind, and metadata's name, namespace, uid,
// resourceVersion, generation and timestamps). It is decoded only if the guest asks.

// PatchStatus writes status with a JSON merge patch of the status subresource,
// `{"status": status}`: fields absent from status are left alone, null removes a field, and
// lists (such as conditions) are replaced whole. status is anything [json.Marshal] takes (a
// struct of the guest's, a map, [json.RawMessage]). A status patch changes status only: to
// write labels, annotations or owner references, [Apply] the object.
//
// Errors: `conflict`, `not-found` (the object is gone), `invalid` (rejected by the schema),
// `denied` (no status write grant); a status that does not marshal is [Permanent].
func PatchStatus(ref ObjectRef, status any) (*Object, error) {
	patch, err := json.Marshal(struct {
		Status any `json:"status"`
	}{status})
	if err != nil {
		return nil, Permanentf("the status of %s does not serialise: %w", ref, err)
	}
	text, err := host().patchStatus(ref, string(patch))
	if err != nil {
		return nil, err
	}
	return &Object{text: text, ref: ref}, nil
}

// Apply is a server-side apply (apiVersion, kind and metadata.name required) with the guest
// as field manager, forced: the guest takes every field it sets, from any other manager. It
// owns the fields it sends and nothing else, so an object of the guest's own send whole; on an
// object others manage too (a Deployment kubectl, Helm or an HPA writes), send only the fields
// the guest manages, or use [ApplyWith] without Force. object is JSON text (a string,
// []byte or [json.RawMessage], as [UseFakeHost] takes objects) or anything else
// [json.Marshal] takes. An object that does not marshal is [Permanent].
func Apply(object any) (*Object, error) {
	body, err := applied(object)
	if err != nil {
		return nil, err
	}
	text, err := host().apply(string(body))
	if err != nil {
		return nil, err
	}
	return &Object{text: text, what: "the object returned by apply"}, nil
}

// ApplyOptions says how [ApplyWith] applies.
type ApplyOptions struct {
	// Force takes fields another field manager owns. Without it, a field object sets that
	// another manager owns is a `conflict` whose text names the field and the manager
	// (the API server's), and nothing is written.
	Force bool
}

// ApplyWith is a server-side apply of the fields the guest manages, as its own field manager:
// object carries apiVersion, kind, metadata.name (and namespace) and only the fields the guest
// sets, e.g. one annotation of a Deployment's Pod template. Every other field stays its
// owner's; a field the guest applied before and leaves out now is removed. Errors as for
// [Apply], and `conflict` as [ApplyOptions] says (transient: retried with backoff until the
// other manager lets go).
func ApplyWith(object any, options ApplyOptions) (*Object, error) {
	body, err := applied(object)
	if err != nil {
		return nil, err
	}
	text, err := host().applyWith(string(body), options.Force)
	if err != nil {
		return nil, err
	}
	return &Object{text: text, what: "the object returned by apply"}, nil
}

// applied is the text of an object to apply: JSON text as it is (a JSON string is never an
// object, so a string argument can only mean its text), anything else marshalled.
func applied(object any) ([]byte, error) {
	switch text := object.(type) {
	case string:
		return []byte(text), nil
	case []byte:
		return text, nil
	}
	body, err := json.Marshal(object)
	if err != nil {
		return nil, Permanentf("the object to apply does not serialise: %w", err)
	}
	return body, nil
}

// Delete deletes an object; false when it was already gone.
func Delete(ref ObjectRef) (bool, error) {
	return host().delete(ref)
}
