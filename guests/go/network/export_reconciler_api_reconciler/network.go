// Package export_reconciler_api_reconciler is the sample-controller `Network`
// (`samplecrd.k8s.io/v1`) in Go: a port of the Rust reference guest (guests/network), with the
// same behaviour, pinned by the same fixtures (host/tests/fixtures/network-*) and end-to-end
// test (tests/tests/network.rs). For every Network there is one backend network with id
// `namespace/name`.
//
// A reconcile reads top to bottom, as in client-go's sample-controller:
//
//  1. Object gone: delete the backend network (idempotent). Deleting: delete it, event
//     `Deleted`; the host then removes the finalizer. A failed delete is retried.
//  2. Validate the spec (spec.go). Invalid: `Ready=False InvalidSpec`, a warning, and no retry,
//     since only a new spec can fix it.
//  3. Read the backend network and plan (status.go): create it, correct drift, or nothing. The
//     manifest's 30 s resync is what brings a bridge deleted by hand back.
//  4. Report: `Ready=True Synced` with what the backend has. The backend rejecting the spec is
//     `Ready=False BackendRejected` without retry; any other backend failure is
//     `Ready=False BackendError` and a retry with backoff.
//
// Events: `Synced` only when something was created or corrected, warnings on every failure. The
// status is written only when it changed.
package export_reconciler_api_reconciler

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"wit_component/reconciler_api_cluster"
	"wit_component/reconciler_api_log"
	backend "wit_component/reconciler_api_network_backend"
	"wit_component/reconciler_api_reconciler"
	"wit_component/reconciler_api_types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

type (
	action  = reconciler_api_types.Action
	rerror  = reconciler_api_types.ReconcileError
	hostErr = reconciler_api_types.Error
	ref     = reconciler_api_types.ObjectRef
	result  = witTypes.Result[action, rerror]
)

// Manifest: the Network kind, its finalizer, four keys at a time, a resync every 30 s.
func Manifest() reconciler_api_reconciler.ControllerManifest {
	return reconciler_api_reconciler.ControllerManifest{
		Name:          "network",
		Primary:       reconciler_api_types.Gvk{Group: "samplecrd.k8s.io", Version: "v1", Kind: "Network"},
		Namespace:     witTypes.None[string](),
		LabelSelector: witTypes.None[string](),
		Finalizer:     witTypes.Some("samplecrd.k8s.io/network-backend"),
		Concurrency:   4,
		ResyncSeconds: 30,
	}
}

// networkObject keeps spec and status raw, so that a spec of the wrong shape is reported by
// validate in the status, and a mangled status is overwritten rather than blocking every
// reconcile (and deletion) of the object.
type networkObject struct {
	Metadata *struct {
		Generation *int64 `json:"generation"`
	} `json:"metadata"`
	Spec   json.RawMessage `json:"spec"`
	Status json.RawMessage `json:"status"`
}

// Reconcile brings one Network's backend network to its spec and reports it in the status.
func Reconcile(request reconciler_api_reconciler.Request) result {
	network := request.Ref
	id := backendID(network)
	done := witTypes.Ok[action, rerror](action{RequeueAfterMs: witTypes.None[uint64]()})
	if request.Object.Tag() == witTypes.OptionNone {
		// Normally the finalizer path below already cleaned up; this covers objects deleted
		// while the guest was not installed.
		deleted := backend.Delete(id)
		if deleted.Tag() == witTypes.ResultErr {
			return witTypes.Err[action](backendFailure(id, "delete", deleted.Err()))
		}
		if deleted.Ok() {
			info(fmt.Sprintf("deleted backend network %s of a Network that is gone", id))
		}
		return done
	}
	if request.Deleting {
		deleted := backend.Delete(id)
		if deleted.Tag() == witTypes.ResultErr {
			return witTypes.Err[action](backendFailure(id, "delete", deleted.Err()))
		}
		what := "was already gone"
		if deleted.Ok() {
			what = "deleted"
		}
		event(network, reconciler_api_cluster.EventType_Normal, "Deleted", fmt.Sprintf("backend network %s %s", id, what))
		return done
	}

	var object networkObject
	if err := json.Unmarshal([]byte(request.Object.Some()), &object); err != nil || object.Metadata == nil {
		if err == nil {
			err = fmt.Errorf("missing field `metadata`")
		}
		return permanent(fmt.Sprintf("%s does not parse: %v", display(network), err))
	}
	generation := object.Metadata.Generation
	before := readStatus(network, object.Status)
	var status Status
	if before != nil {
		status = before.clone()
	}

	valid, specErr := validate(object.Spec)
	if specErr != nil {
		message := specErr.Error()
		status.setReady(generation, false, "InvalidSpec", message)
		event(network, reconciler_api_cluster.EventType_Warning, "InvalidSpec", message)
		if failed := writeStatus(network, before, &status); failed != nil {
			return witTypes.Err[action](*failed)
		}
		return done
	}
	desired := backend.NetworkSpec{Id: id, Cidr: valid.cidr.String(), Gateway: valid.gateway.String()}

	actual, failure := converge(network, desired, valid)
	switch {
	case failure == nil:
		message := fmt.Sprintf("network %s is up on %s with %s, gateway %s", id, actual.InterfaceName, actual.Cidr, actual.Gateway)
		status.setReady(generation, true, "Synced", message)
		status.setActual(actual)
	case failure.Tag() == reconciler_api_types.Error_Invalid:
		message := "the backend rejected the spec: " + failure.Invalid()
		status.setReady(generation, false, "BackendRejected", message)
		event(network, reconciler_api_cluster.EventType_Warning, "BackendRejected", message)
	default:
		failed := backendFailure(id, "ensure", *failure)
		message := errorMessage(failed)
		status.setReady(generation, false, "BackendError", message)
		event(network, reconciler_api_cluster.EventType_Warning, "BackendFailed", message)
		if write := writeStatus(network, before, &status); write != nil {
			warn("could not record the backend failure: " + errorMessage(*write))
		}
		return witTypes.Err[action](failed)
	}
	if failed := writeStatus(network, before, &status); failed != nil {
		return witTypes.Err[action](*failed)
	}
	return done
}

// readStatus is the status as last written, or nil when absent or unreadable.
func readStatus(network ref, raw json.RawMessage) *Status {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	status, err := parseStatus(raw)
	if err != nil {
		warn(fmt.Sprintf("ignoring the unreadable status of %s: %v", display(network), err))
		return nil
	}
	return status
}

// backendID is stable for the object's lifetime and unique across namespaces.
func backendID(network ref) string {
	if network.Namespace.Tag() == witTypes.OptionSome {
		return network.Namespace.Some() + "/" + network.Name
	}
	return network.Name
}

// display spells a reference as log lines do: `Kind namespace/name`.
func display(network ref) string {
	return network.Kind.Kind + " " + backendID(network)
}

// converge brings the backend network to desired, recording `Synced` when it had to change it.
func converge(network ref, desired backend.NetworkSpec, valid validSpec) (backend.NetworkStatus, *hostErr) {
	got := backend.Get(desired.Id)
	if got.Tag() == witTypes.ResultErr {
		failure := got.Err()
		return backend.NetworkStatus{}, &failure
	}
	var current *backend.NetworkStatus
	if got.Ok().Tag() == witTypes.OptionSome {
		value := got.Ok().Some()
		current = &value
	}
	var change string
	drift := plan(valid, current)
	switch {
	case current != nil && drift != nil && len(drift) == 0:
		return *current, nil
	case current == nil:
		info(fmt.Sprintf("creating backend network %s (%s)", desired.Id, desired.Cidr))
		change = fmt.Sprintf("created backend network %s (%s)", desired.Id, desired.Cidr)
	default:
		joined := strings.Join(drift, ", ")
		warn(fmt.Sprintf("backend network %s drifted: %s; correcting", desired.Id, joined))
		change = fmt.Sprintf("corrected backend network %s: %s", desired.Id, joined)
	}
	ensured := backend.Ensure(desired)
	if ensured.Tag() == witTypes.ResultErr {
		failure := ensured.Err()
		return backend.NetworkStatus{}, &failure
	}
	event(network, reconciler_api_cluster.EventType_Normal, "Synced", change)
	return ensured.Ok(), nil
}

// backendFailure: a backend failure other than a rejected spec is retried with backoff, except
// a missing grant, which only an operator can fix (and fixing it reloads the guest).
func backendFailure(id, call string, e hostErr) rerror {
	message := fmt.Sprintf("backend %s of network %s failed: %s", call, id, describe(e))
	if e.Tag() == reconciler_api_types.Error_Denied {
		return reconciler_api_types.MakeReconcileErrorPermanent(message)
	}
	return reconciler_api_types.MakeReconcileErrorTransient(message)
}

// writeStatus writes status with a merge patch, unless it equals what the object already shows.
func writeStatus(network ref, before *Status, status *Status) *rerror {
	if before != nil && reflect.DeepEqual(*before, *status) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		failed := reconciler_api_types.MakeReconcileErrorPermanent(fmt.Sprintf("status does not serialise: %v", err))
		return &failed
	}
	written := reconciler_api_cluster.PatchStatus(network, string(patch))
	if written.Tag() == witTypes.ResultErr {
		failed := fromHost(written.Err())
		return &failed
	}
	return nil
}

// fromHost: conflict, unavailable and other are worth a retry; the rest are not.
func fromHost(e hostErr) rerror {
	switch e.Tag() {
	case reconciler_api_types.Error_Conflict, reconciler_api_types.Error_Unavailable, reconciler_api_types.Error_Other:
		return reconciler_api_types.MakeReconcileErrorTransient(describe(e))
	default:
		return reconciler_api_types.MakeReconcileErrorPermanent(describe(e))
	}
}

func permanent(message string) result {
	return witTypes.Err[action](reconciler_api_types.MakeReconcileErrorPermanent(message))
}

func errorMessage(e rerror) string {
	if e.Tag() == reconciler_api_types.ReconcileError_Transient {
		return e.Transient()
	}
	return e.Permanent()
}

// describe spells a host error as its kind and text, e.g. `denied: no write grant for ...`.
func describe(e hostErr) string {
	switch e.Tag() {
	case reconciler_api_types.Error_Denied:
		return "denied: " + e.Denied()
	case reconciler_api_types.Error_NotFound:
		return "not-found: " + e.NotFound()
	case reconciler_api_types.Error_Conflict:
		return "conflict: " + e.Conflict()
	case reconciler_api_types.Error_Invalid:
		return "invalid: " + e.Invalid()
	case reconciler_api_types.Error_Unavailable:
		return "unavailable: " + e.Unavailable()
	default:
		return "other: " + e.Other()
	}
}

// event records an event; a refused one is logged, never a reason to fail the reconcile.
func event(regarding ref, eventType reconciler_api_cluster.EventType, reason, message string) {
	recorded := reconciler_api_cluster.RecordEvent(reconciler_api_cluster.Event{
		Regarding: regarding, EventType: eventType, Reason: reason, Message: message,
	})
	if recorded.Tag() == witTypes.ResultErr {
		warn(fmt.Sprintf("could not record event %s on %s: %s", reason, display(regarding), describe(recorded.Err())))
	}
}

func info(message string) { reconciler_api_log.Log(reconciler_api_log.Level_Info, message) }
func warn(message string) { reconciler_api_log.Log(reconciler_api_log.Level_Warn, message) }
