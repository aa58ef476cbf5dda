// Package export_reconciler_api_reconciler is config-reloader in Go: a Deployment lists
// ConfigMaps of its namespace in the annotation `reloader.example/configmaps: "a,b"`, and the
// guest keeps the annotation `reloader.example/config-hash` on the Deployment's Pod template
// equal to a hash of those ConfigMaps' `data` and `binaryData`, so a change to any of them rolls
// the Deployment's Pods. Users label nothing; a Deployment without the annotation is left
// alone. docs/examples/config-reloader.md walks through it; tests/tests/config_reloader.rs runs
// it live, and the Rust port (guests/examples/config-reloader) with it.
//
// Least privilege, both ways:
//
//   - its grant writes Deployments with `writeVerbs: {apps/v1/Deployment: [patch]}`: it cannot
//     create or delete one, and an apply of a Deployment that does not exist is refused;
//   - it applies only the one field it manages (a partial object: name, namespace and the Pod
//     template's hash annotation, [reconciler.ApplyWith] without Force), so replicas, images
//     and everything kubectl, Helm or an HPA set stay theirs; if another manager owns the
//     annotation itself, the apply is a conflict naming it, the condition turns False
//     (`HashConflict`, the API server's text) and the reconcile is retried with backoff.
//
// A ConfigMap change reconciles the Deployments of its namespace whose annotation lists it: a
// computed index (ByIndex, the world `indexing-controller`) whose values ConfigMapsOf computes
// from each Deployment when it changes, so a ConfigMap event is a lookup in the host's memory,
// not a guest call. A
// malformed list or a listed ConfigMap that does not exist keeps the last hash (rolling the
// Pods on a typo would be worse) and says so: the Deployment's condition
// `reloader.example/ConfigHashed` turns False with the reason (`InvalidAnnotation`,
// `ConfigMapNotFound`), and a Warning event names it. Removing the annotation removes the hash
// (server-side apply drops the field a manager no longer applies) and the condition.
package export_reconciler_api_reconciler

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"wit_component/reconciler"
)

// The annotations: the list a user writes on the Deployment, and the hash the guest writes on
// its Pod template; the condition type it keeps in the Deployment's status.
const (
	listAnnotation = "reloader.example/configmaps"
	hashAnnotation = "reloader.example/config-hash"
	conditionType  = "reloader.example/ConfigHashed"
)

var (
	deploymentKind = reconciler.GVK{Group: "apps", Version: "v1", Kind: "Deployment"}
	configMapKind  = reconciler.GVK{Version: "v1", Kind: "ConfigMap"}
	// A ConfigMap's name: a DNS-1123 subdomain.
	validName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

func init() {
	reconciler.Register(reconciler.NewManifest("config-reloader", deploymentKind).Watch(
		reconciler.Watch{Kind: configMapKind, Mapping: reconciler.ByIndex("configmaps", reconciler.IndexName, ConfigMapsOf)},
	), reconcile)
}

// deployment is what the guest reads of a Deployment.
type deployment struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Template struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		} `json:"template"`
	} `json:"spec"`
	Status struct {
		// Kept as written: the deployment controller's conditions carry fields of their own.
		Conditions []map[string]any `json:"conditions"`
	} `json:"status"`
}

// ParseList is the ConfigMap names of an annotation value (`a, b`), sorted and once each, or
// why it is malformed: an empty entry or one that is not a ConfigMap name.
func ParseList(value string) ([]string, error) {
	seen := map[string]bool{}
	var names []string
	for _, entry := range strings.Split(value, ",") {
		name := strings.TrimSpace(entry)
		if name == "" {
			return nil, fmt.Errorf("%s %q has an empty entry", listAnnotation, value)
		}
		if len(name) > 253 || !validName.MatchString(name) {
			return nil, fmt.Errorf("%s lists %q, which is not a ConfigMap name", listAnnotation, name)
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// ConfigMapsOf is the ConfigMaps a Deployment lists, the values of the index "configmaps": the
// host keeps them and looks a ConfigMap's event up among them, with no guest call. None when
// the list is missing or malformed (the reconcile says so; the Deployment's next change indexes
// it again).
func ConfigMapsOf(primary *reconciler.Object) ([]string, error) {
	var d deployment
	if primary.Decode(&d) != nil {
		return nil, nil
	}
	value, annotated := d.Metadata.Annotations[listAnnotation]
	if !annotated {
		return nil, nil
	}
	names, _ := ParseList(value) // a malformed list names nothing
	return names, nil
}

// Hash is the hash of ConfigMaps (their data and binaryData) in the order given: hex of
// SHA-256's first 16 bytes over each name and its contents as compact JSON (keys sorted, `<`,
// `>` and `&` as themselves), the bytes the Rust and Python builds hash, so that moving a
// Deployment from one build to another rolls no Pod.
func Hash(names []string, contents []map[string]any) string {
	digest := sha256.New()
	for i, name := range names {
		var text bytes.Buffer
		encoder := json.NewEncoder(&text) // maps encode with sorted keys
		encoder.SetEscapeHTML(false)
		_ = encoder.Encode(contents[i])
		fmt.Fprintf(digest, "%s\x00%s\x00", name, bytes.TrimSuffix(text.Bytes(), []byte("\n")))
	}
	return hex.EncodeToString(digest.Sum(nil)[:16])
}

// outcome is the condition a reconcile leaves, and the hash to apply (nil: keep the last one;
// empty: none).
type outcome struct {
	hash            *string
	ok              bool
	reason, message string
}

func reconcile(req *reconciler.Request) (reconciler.Action, error) {
	if req.Gone() {
		return reconciler.Action{}, nil
	}
	var d deployment
	if err := req.Object.Decode(&d); err != nil {
		return reconciler.Action{}, err
	}
	value, annotated := d.Metadata.Annotations[listAnnotation]
	current, hashed := d.Spec.Template.Metadata.Annotations[hashAnnotation]
	if !annotated {
		// Not (or no longer) ours: drop the hash and the condition if they are there.
		if hashed {
			if err := applyHash(req.Ref, ""); err != nil {
				return reconciler.Action{}, err
			}
		}
		return reconciler.Action{}, writeCondition(req.Ref, d.Status.Conditions, nil)
	}
	result, err := desired(req.Ref.Namespace, value)
	if err != nil {
		return reconciler.Action{}, err
	}
	if result.hash != nil && (*result.hash != current || !hashed) {
		if err := applyHash(req.Ref, *result.hash); err != nil {
			e, conflict := reconciler.AsHostError(err)
			if !conflict || e.Kind != reconciler.Conflict {
				return reconciler.Action{}, err
			}
			// Another field manager owns the annotation: say who, and retry with backoff.
			message := "the hash annotation is another field manager's: " + e.Message
			reconciler.WarningEvent(req.Ref, "HashConflict", message)
			condition := map[string]any{
				"type": conditionType, "status": reconciler.ConditionFalse, "reason": "HashConflict", "message": message,
			}
			if err := writeCondition(req.Ref, d.Status.Conditions, condition); err != nil {
				return reconciler.Action{}, err
			}
			return reconciler.Action{}, reconciler.Transient(err)
		}
	}
	status := reconciler.ConditionTrue
	if !result.ok {
		status = reconciler.ConditionFalse
		reconciler.WarningEvent(req.Ref, result.reason, result.message)
	}
	condition := map[string]any{
		"type": conditionType, "status": status, "reason": result.reason, "message": result.message,
	}
	return reconciler.Action{}, writeCondition(req.Ref, d.Status.Conditions, condition)
}

// desired is what the annotation `value` asks for in namespace.
func desired(namespace, value string) (outcome, error) {
	names, err := ParseList(value)
	if err != nil {
		return outcome{reason: "InvalidAnnotation", message: err.Error() + "; the last hash is kept"}, nil
	}
	contents := make([]map[string]any, len(names))
	var missing []string
	for i, name := range names {
		found, err := reconciler.Get(reconciler.ObjectRef{Kind: configMapKind, Namespace: namespace, Name: name})
		if err != nil {
			return outcome{}, reconciler.Transientf("reading ConfigMap %s/%s: %w", namespace, name, err)
		}
		if found == nil {
			missing = append(missing, name)
			continue
		}
		var configMap struct {
			Data       map[string]any `json:"data"`
			BinaryData map[string]any `json:"binaryData"`
		}
		if err := found.Decode(&configMap); err != nil {
			return outcome{}, err
		}
		contents[i] = map[string]any{"data": configMap.Data, "binaryData": configMap.BinaryData}
	}
	if len(missing) > 0 {
		message := fmt.Sprintf("ConfigMap %s not found in namespace %s; the last hash is kept", strings.Join(missing, ", "), namespace)
		return outcome{reason: "ConfigMapNotFound", message: message}, nil
	}
	hash := Hash(names, contents)
	return outcome{hash: &hash, ok: true, reason: "Hashed", message: "hash of ConfigMap " + strings.Join(names, ", ")}, nil
}

// applyHash applies the Deployment with only the Pod template's hash annotation (none for "":
// server-side apply then removes the one it set before), never taking a field from another
// manager.
func applyHash(ref reconciler.ObjectRef, hash string) error {
	template := map[string]any{}
	if hash != "" {
		template["metadata"] = map[string]any{"annotations": map[string]any{hashAnnotation: hash}}
	}
	body := map[string]any{
		"apiVersion": deploymentKind.APIVersion(),
		"kind":       deploymentKind.Kind,
		"metadata":   map[string]any{"name": ref.Name, "namespace": ref.Namespace},
	}
	if hash != "" {
		body["spec"] = map[string]any{"template": template}
	}
	_, err := reconciler.ApplyWith(body, reconciler.ApplyOptions{})
	return err
}

// writeCondition sets (nil: removes) the guest's condition among the Deployment's, keeping the
// others as written and the transition time while the status holds; nothing is written when
// nothing changes. The list is written whole (a merge patch replaces lists).
func writeCondition(ref reconciler.ObjectRef, conditions []map[string]any, condition map[string]any) error {
	var kept []map[string]any
	var previous map[string]any
	for _, c := range conditions {
		if c["type"] == conditionType {
			previous = c
			continue
		}
		kept = append(kept, c)
	}
	if condition == nil && previous == nil {
		return nil
	}
	if condition != nil {
		// A DeploymentCondition's two times: the last change of status, and the last write.
		condition["lastTransitionTime"] = reconciler.Now()
		condition["lastUpdateTime"] = reconciler.Now()
		if previous != nil && previous["status"] == condition["status"] {
			condition["lastTransitionTime"] = previous["lastTransitionTime"]
			if previous["reason"] == condition["reason"] && previous["message"] == condition["message"] {
				return nil
			}
		}
		kept = append(kept, condition)
	}
	if kept == nil {
		kept = []map[string]any{}
	}
	if _, err := reconciler.PatchStatus(ref, map[string]any{"conditions": kept}); err != nil {
		return reconciler.Transientf("status write of %s failed: %w", ref, err)
	}
	return nil
}
