package reconciler

// Reads from the host's informer caches, never from the API server. Each call copies the
// object(s) as JSON across the component boundary: cheap for one object, proportional to the
// result for List. Only kinds the guest's grant lets it read; others fail with `denied`.

// Get is the cached object, or nil when it does not exist (or is not cached yet).
func Get(ref ObjectRef) (*Object, error) {
	text, found, err := host().get(ref)
	if err != nil || !found {
		return nil, err
	}
	return &Object{text: text, ref: ref}, nil
}

// List is the cached objects of kind in namespace ("" = all namespaces) matching
// labelSelector (Kubernetes syntax, e.g. `app=web,tier!=db`; "" = all). A bad selector is
// `invalid`.
func List(kind GVK, namespace, labelSelector string) ([]*Object, error) {
	texts, err := host().list(kind, namespace, labelSelector)
	if err != nil {
		return nil, err
	}
	what := "a " + kind.Kind + " from the cache"
	objects := make([]*Object, len(texts))
	for i, text := range texts {
		objects[i] = &Object{text: text, what: what}
	}
	return objects, nil
}

// DecodeAll decodes every object into a T, e.g. the result of [List]; the first mismatch is a
// [Permanent] error, as for [Object.Decode].
func DecodeAll[T any](objects []*Object) ([]T, error) {
	decoded := make([]T, len(objects))
	for i, object := range objects {
		if err := object.Decode(&decoded[i]); err != nil {
			return nil, err
		}
	}
	return decoded, nil
}
