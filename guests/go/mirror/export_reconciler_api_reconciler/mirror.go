// Package export_reconciler_api_reconciler is the Mirror (`mirror.reconciler.dev/v1alpha1`,
// examples/crds/mirror.yaml) in Go, on the Go SDK: a ConfigMap of the Mirror's namespace
// (`spec.source`) copied into each namespace `spec.targetNamespaces` lists. It is a port of
// guests/python/mirror with the same behaviour and status, pinned by the same fixtures
// (host/tests/fixtures/mirror-*) and live test (tests/tests/mirror.rs). Built for the world
// `watching-controller` (`wit-world` beside go.mod): its watches are the contract's optional
// `watches` export, which a manifest's owner and label mappings cannot say.
//
// Each copy has the source's name, its `data` and `binaryData`, and two labels naming its
// Mirror (ownerNamespaceLabel, ownerNameLabel): it lives in another namespace, where an owner
// reference cannot point. A reconcile
//
//   - applies the copy (server-side apply) in each listed namespace that exists, unless it is
//     already the source's; a listed namespace that does not exist (or is being deleted) is
//     skipped, not an error, and the Mirror's own namespace is never a target;
//   - deletes every copy of this Mirror that is not wanted any more: in a namespace no longer
//     listed, or of a former `spec.source`;
//   - leaves a ConfigMap it did not make alone (Ready=False `TargetConflict`);
//   - on deletion (the finalizer `mirror.reconciler.dev/cleanup`) deletes every copy.
//
// A key the source lacks but a copy has, added by hand, is removed: the apply answers with the
// copy as stored, and a copy that still has a key the guest did not apply is deleted and
// applied again (server-side apply cannot take away a field another manager owns).
//
// The watches: a ConfigMap change reconciles the Mirrors of its namespace whose `spec.source`
// names it (a field index, no guest call); a change of a copy reconciles the Mirror its labels
// name (only events of ConfigMaps carrying the owner-name label count for that); a Namespace change
// reconciles every Mirror listing it (a field index over `spec.targetNamespaces[*]`).
//
// `status`: `copies` (how many namespaces hold a copy), `namespaces` (which, sorted),
// `missingNamespaces` (listed, but not there), `observedGeneration`, and the condition Ready:
// `Synced` (True); `SourceNotFound`, `TargetConflict` (False, the reconcile succeeds: the
// source's creation or the conflicting ConfigMap's removal reconciles it again); `CopyFailed`
// (False, transient, or permanent when the host refused: `denied`, `invalid`); `InvalidSpec`
// (False, permanent).
package export_reconciler_api_reconciler

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"wit_component/reconciler"
)

var (
	mirrorKind    = reconciler.GVK{Group: "mirror.reconciler.dev", Version: "v1alpha1", Kind: "Mirror"}
	configMapKind = reconciler.GVK{Version: "v1", Kind: "ConfigMap"}
	namespaceKind = reconciler.GVK{Version: "v1", Kind: "Namespace"}
)

const (
	ownerNamespaceLabel = "mirror.reconciler.dev/owner-namespace"
	ownerNameLabel      = "mirror.reconciler.dev/owner-name"
)

func init() {
	reconciler.Register(reconciler.NewManifest("mirror", mirrorKind).
		WithFinalizer("mirror.reconciler.dev/cleanup").
		WithGenerationChangedOnly().
		Watch(
			reconciler.Watch{Kind: configMapKind, Mapping: reconciler.ByField("spec.source", reconciler.IndexName)},
			reconciler.Watch{
				Kind:          configMapKind,
				Mapping:       reconciler.ByOwnerLabels(ownerNamespaceLabel, ownerNameLabel),
				LabelSelector: ownerNameLabel,
			},
			reconciler.Watch{Kind: namespaceKind, Mapping: reconciler.ByField("spec.targetNamespaces[*]", reconciler.IndexName)},
		), reconcile)
}

// failed is a reconcile that ends with Ready=False: the reason, the message, and whether a
// retry could help.
type failed struct {
	reason, message string
	transient       bool
}

func (f *failed) Error() string { return f.reason + ": " + f.message }

func reconcile(req *reconciler.Request) (reconciler.Action, error) {
	if req.Gone() {
		return reconciler.Action{}, nil // the finalizer saw its copies deleted first
	}
	mirror, err := req.Object.Fields()
	if err != nil {
		return reconciler.Action{}, err
	}
	metadata, _ := mirror["metadata"].(map[string]any)
	generation := metadata["generation"]
	status, _ := mirror["status"].(map[string]any)
	copies := newCopies(req.Ref)
	var outcome outcome
	if req.Deleting {
		var removed []string
		removed, err = copies.deleteAllBut(nil)
		if err == nil {
			reconciler.LogInfof("deleted %d copies", len(removed))
			return reconciler.Action{}, nil
		}
	} else {
		var s spec
		if s, err = specOf(mirror["spec"], req.Ref); err == nil {
			outcome, err = copies.sync(s)
		}
	}
	if err != nil {
		return reconciler.Action{}, fail(req.Ref, status, generation, err)
	}
	ready := condition(outcome.ready, outcome.reason, outcome.message, generation)
	fields := map[string]any{
		"observedGeneration": generation,
		"copies":             len(outcome.namespaces),
		"namespaces":         outcome.namespaces,
		"missingNamespaces":  outcome.missing,
	}
	return reconciler.Action{}, writeStatus(req.Ref, status, ready, fields)
}

// fail records a failed reconcile as Ready=False and returns its error: transient or
// permanent as the failure says.
func fail(ref reconciler.ObjectRef, status map[string]any, generation any, err error) error {
	f, ok := err.(*failed)
	if !ok {
		return err
	}
	ready := condition(false, f.reason, f.message, generation)
	if err := writeStatus(ref, status, ready, map[string]any{"observedGeneration": generation}); err != nil {
		return err
	}
	if f.transient {
		return reconciler.Transient(f)
	}
	return reconciler.Permanent(f)
}

// spec is the Mirror's spec, checked for what the CRD requires.
type spec struct {
	source string
	// In the order given, once each, never the Mirror's own namespace: there the copy would be
	// the source itself.
	targets []string
}

func specOf(value any, owner reconciler.ObjectRef) (spec, error) {
	fields, _ := value.(map[string]any)
	source, ok := fields["source"].(string)
	if !ok || source == "" {
		return spec{}, &failed{"InvalidSpec", "spec.source must name a ConfigMap", false}
	}
	listed := []any{}
	if value, present := fields["targetNamespaces"]; present {
		listed, ok = value.([]any)
	}
	targets := []string{}
	seen := map[string]bool{}
	for _, item := range listed {
		target, isString := item.(string)
		if !isString || target == "" {
			ok = false
			break
		}
		if !seen[target] && target != owner.Namespace {
			seen[target] = true
			targets = append(targets, target)
		}
	}
	if !ok {
		return spec{}, &failed{"InvalidSpec", "spec.targetNamespaces must list namespaces", false}
	}
	if utf8.RuneCountInString(owner.Name) > 63 {
		// The owner-name label holds the name, and a label value at most 63 characters.
		return spec{}, &failed{"InvalidSpec", "a Mirror's name must be at most 63 characters", false}
	}
	return spec{source: source, targets: targets}, nil
}

// condition is Ready as the guest writes it: stamped now, with the generation it describes.
func condition(ready bool, reason, message string, generation any) reconciler.Condition {
	c := reconciler.NewCondition("Ready", ready, reason, message)
	if number, ok := generation.(json.Number); ok {
		c.ObservedGeneration, _ = number.Int64()
	}
	return c
}

// writeStatus patches fields and the Ready condition, unless the status already says all of
// it.
func writeStatus(ref reconciler.ObjectRef, status map[string]any, ready reconciler.Condition, fields map[string]any) error {
	var conditions []reconciler.Condition
	if listed, ok := status["conditions"]; ok && listed != nil {
		if text, err := json.Marshal(listed); err == nil {
			_ = json.Unmarshal(text, &conditions) // a mangled list is overwritten
		}
	}
	changed := reconciler.SetCondition(&conditions, ready)
	patch := map[string]any{"conditions": conditions}
	for field, value := range fields {
		changed = changed || !sameJSON(status[field], value)
		patch[field] = value
	}
	if !changed {
		return nil
	}
	if _, err := reconciler.PatchStatus(ref, patch); err != nil {
		return reconciler.Transientf("status write failed: %w", err)
	}
	return nil
}

// sameJSON reports whether two values are written alike (a decoded json.Number and an int
// compare equal, as Python's == does).
func sameJSON(a, b any) bool {
	x, errX := json.Marshal(a)
	y, errY := json.Marshal(b)
	return errX == nil && errY == nil && string(x) == string(y)
}

// call wraps a host call's error: every call serves a copy, so a refusal is `CopyFailed`,
// retried unless retrying cannot help (`denied`, `invalid`, `not-found`).
func call(what string, err error) error {
	if err == nil {
		return nil
	}
	transient := true
	if e, ok := reconciler.AsHostError(err); ok {
		transient = e.Transient()
	}
	return &failed{"CopyFailed", fmt.Sprintf("%s: %v", what, err), transient}
}
