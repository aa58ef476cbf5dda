// Package export_reconciler_api_reconciler is the sample-controller `Network`
// (`samplecrd.k8s.io/v1`) in Go on the Go SDK (package reconciler, guests/sdk-go, and its
// networkbackend): a port of the Rust reference guest (guests/network), with the same behaviour, pinned by the same fixtures (host/tests/fixtures/network-*) and end-to-end
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
	"time"

	"wit_component/reconciler"
	backend "wit_component/reconciler/networkbackend"
)

// The manifest: the Network kind, its finalizer, four keys at a time, a resync every 30 s.
func init() {
	network := reconciler.GVK{Group: "samplecrd.k8s.io", Version: "v1", Kind: "Network"}
	reconciler.Register(reconciler.NewManifest("network", network).
		WithFinalizer("samplecrd.k8s.io/network-backend").
		WithConcurrency(4).
		WithResync(30*time.Second), reconcile)
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

// reconcile brings one Network's backend network to its spec and reports it in the status.
func reconcile(req *reconciler.Request) (reconciler.Action, error) {
	network := req.Ref
	id := network.Key().String() // stable for the object's lifetime, unique across namespaces
	done := reconciler.Action{}
	if req.Gone() {
		// Normally the finalizer path below already cleaned up; this covers objects deleted
		// while the guest was not installed.
		deleted, err := backend.Delete(id)
		if err != nil {
			return done, backendFailure(id, "delete", err)
		}
		if deleted {
			reconciler.LogInfof("deleted backend network %s of a Network that is gone", id)
		}
		return done, nil
	}
	if req.Deleting {
		deleted, err := backend.Delete(id)
		if err != nil {
			return done, backendFailure(id, "delete", err)
		}
		what := "was already gone"
		if deleted {
			what = "deleted"
		}
		reconciler.NormalEvent(network, "Deleted", fmt.Sprintf("backend network %s %s", id, what))
		return done, nil
	}

	var object networkObject
	if err := req.Object.Decode(&object); err != nil {
		return done, err
	}
	if object.Metadata == nil {
		return done, reconciler.Permanentf("%s does not parse: missing field `metadata`", network)
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
		reconciler.WarningEvent(network, "InvalidSpec", message)
		return done, writeStatus(network, before, &status)
	}
	desired := backend.Spec{ID: id, CIDR: valid.cidr.String(), Gateway: valid.gateway.String()}

	actual, err := converge(network, desired, valid)
	rejected, _ := reconciler.AsHostError(err)
	switch {
	case err == nil:
		message := fmt.Sprintf("network %s is up on %s with %s, gateway %s", id, actual.InterfaceName, actual.CIDR, actual.Gateway)
		status.setReady(generation, true, "Synced", message)
		status.setActual(actual)
	case rejected != nil && rejected.Kind == reconciler.Invalid:
		message := "the backend rejected the spec: " + rejected.Message
		status.setReady(generation, false, "BackendRejected", message)
		reconciler.WarningEvent(network, "BackendRejected", message)
	default:
		failed := backendFailure(id, "ensure", err)
		status.setReady(generation, false, "BackendError", failed.Error())
		reconciler.WarningEvent(network, "BackendFailed", failed.Error())
		if write := writeStatus(network, before, &status); write != nil {
			reconciler.LogWarnf("could not record the backend failure: %v", write)
		}
		return done, failed
	}
	return done, writeStatus(network, before, &status)
}

// readStatus is the status as last written, or nil when absent or unreadable.
func readStatus(network reconciler.ObjectRef, raw json.RawMessage) *Status {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	status, err := parseStatus(raw)
	if err != nil {
		reconciler.LogWarnf("ignoring the unreadable status of %s: %v", network, err)
		return nil
	}
	return status
}

// converge brings the backend network to desired, recording `Synced` when it had to change it.
func converge(network reconciler.ObjectRef, desired backend.Spec, valid validSpec) (backend.Status, error) {
	current, err := backend.Get(desired.ID)
	if err != nil {
		return backend.Status{}, err
	}
	var change string
	drift := plan(valid, current)
	switch {
	case current != nil && len(drift) == 0:
		return *current, nil
	case current == nil:
		reconciler.LogInfof("creating backend network %s (%s)", desired.ID, desired.CIDR)
		change = fmt.Sprintf("created backend network %s (%s)", desired.ID, desired.CIDR)
	default:
		joined := strings.Join(drift, ", ")
		reconciler.LogWarnf("backend network %s drifted: %s; correcting", desired.ID, joined)
		change = fmt.Sprintf("corrected backend network %s: %s", desired.ID, joined)
	}
	actual, err := backend.Ensure(desired)
	if err != nil {
		return backend.Status{}, err
	}
	reconciler.NormalEvent(network, "Synced", change)
	return actual, nil
}

// backendFailure: a backend failure other than a rejected spec is retried with backoff, except
// a missing grant, which only an operator can fix (and fixing it reloads the guest).
func backendFailure(id, call string, err error) error {
	failure := fmt.Errorf("backend %s of network %s failed: %w", call, id, err)
	if denied, _ := reconciler.AsHostError(err); denied != nil && denied.Kind == reconciler.Denied {
		return reconciler.Permanent(failure)
	}
	return reconciler.Transient(failure)
}

// writeStatus writes status with a merge patch, unless it equals what the object already shows.
func writeStatus(network reconciler.ObjectRef, before *Status, status *Status) error {
	if before != nil && reflect.DeepEqual(*before, *status) {
		return nil
	}
	_, err := reconciler.PatchStatus(network, status)
	return err
}
