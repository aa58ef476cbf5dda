//go:build wasip1

package reconciler

// The imports, through the bindings wit-bindgen generates from wit/ into every guest's build
// (the reconciler_api_* packages). Conversions only: whatever can be wrong is decided in the
// native code around it.

import (
	"wit_component/reconciler_api_cluster"
	"wit_component/reconciler_api_lister"
	"wit_component/reconciler_api_log"
	"wit_component/reconciler_api_queue"
	"wit_component/reconciler_api_types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

func init() { hostCalls = bindings{} }

type bindings struct{}

func (bindings) get(ref ObjectRef) (string, bool, error) {
	got := reconciler_api_lister.Get(witRef(ref))
	if got.Tag() == witTypes.ResultErr {
		return "", false, FromWITError(got.Err())
	}
	if object := got.Ok(); object.Tag() == witTypes.OptionSome {
		return object.Some(), true, nil
	}
	return "", false, nil
}

func (bindings) list(kind GVK, namespace, labelSelector string) ([]string, error) {
	listed := reconciler_api_lister.List(witGVK(kind), option(namespace), option(labelSelector))
	if listed.Tag() == witTypes.ResultErr {
		return nil, FromWITError(listed.Err())
	}
	return listed.Ok(), nil
}

func (bindings) patchStatus(ref ObjectRef, patch string) (string, error) {
	return text(reconciler_api_cluster.PatchStatus(witRef(ref), patch))
}

func (bindings) apply(object string) (string, error) {
	return text(reconciler_api_cluster.Apply(object))
}

func (bindings) applyWith(object string, force bool) (string, error) {
	return text(reconciler_api_cluster.ApplyWith(object, reconciler_api_cluster.ApplyOptions{Force: force}))
}

func (bindings) delete(ref ObjectRef) (bool, error) {
	deleted := reconciler_api_cluster.Delete(witRef(ref))
	if deleted.Tag() == witTypes.ResultErr {
		return false, FromWITError(deleted.Err())
	}
	return deleted.Ok(), nil
}

func (bindings) recordEvent(event Event) error {
	return unit(reconciler_api_cluster.RecordEvent(reconciler_api_cluster.Event{
		Regarding: witRef(event.Regarding),
		EventType: reconciler_api_cluster.EventType(event.Type),
		Reason:    event.Reason,
		Message:   event.Message,
	}))
}

func (bindings) enqueue(key ObjectKey, afterMs uint64, delayed bool) error {
	after := witTypes.None[uint64]()
	if delayed {
		after = witTypes.Some(afterMs)
	}
	return unit(reconciler_api_queue.Enqueue(
		reconciler_api_types.ObjectKey{Namespace: option(key.Namespace), Name: key.Name}, after))
}

func (bindings) log(level Level, message string) {
	reconciler_api_log.Log(reconciler_api_log.Level(level), message)
}

// FromWITError is the [HostError] of an error the generated bindings returned, for the SDK's
// packages that wrap other imports (networkbackend); guests do not need it.
func FromWITError(e reconciler_api_types.Error) error {
	switch e.Tag() {
	case reconciler_api_types.ErrorDenied:
		return &HostError{Denied, e.Denied()}
	case reconciler_api_types.ErrorNotFound:
		return &HostError{NotFound, e.NotFound()}
	case reconciler_api_types.ErrorConflict:
		return &HostError{Conflict, e.Conflict()}
	case reconciler_api_types.ErrorInvalid:
		return &HostError{Invalid, e.Invalid()}
	case reconciler_api_types.ErrorUnavailable:
		return &HostError{Unavailable, e.Unavailable()}
	default:
		return &HostError{Other, e.Other()}
	}
}

func text(result witTypes.Result[string, reconciler_api_types.Error]) (string, error) {
	if result.Tag() == witTypes.ResultErr {
		return "", FromWITError(result.Err())
	}
	return result.Ok(), nil
}

func unit(result witTypes.Result[witTypes.Unit, reconciler_api_types.Error]) error {
	if result.Tag() == witTypes.ResultErr {
		return FromWITError(result.Err())
	}
	return nil
}

// option is the contract's option<string>: "" is none.
func option(value string) witTypes.Option[string] {
	if value == "" {
		return witTypes.None[string]()
	}
	return witTypes.Some(value)
}

func unoption(value witTypes.Option[string]) string {
	if value.Tag() == witTypes.OptionSome {
		return value.Some()
	}
	return ""
}

func witGVK(kind GVK) reconciler_api_types.Gvk {
	return reconciler_api_types.Gvk{Group: kind.Group, Version: kind.Version, Kind: kind.Kind}
}

func witRef(ref ObjectRef) reconciler_api_types.ObjectRef {
	return reconciler_api_types.ObjectRef{Kind: witGVK(ref.Kind), Namespace: option(ref.Namespace), Name: ref.Name}
}
