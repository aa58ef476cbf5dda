// Package export_reconciler_api_reconciler is the test guest `watcher` in Go: a port of
// guests/testing/watcher (the Rust SDK's), with the same manifest, watches and map, declared
// with the Go SDK's Manifest.Watch and built for the world `watching-controller`
// (tests/tests/sdk_watches.rs checks that the host reads the same watches from every build).
//
// It reconciles `test.reconciler.dev/v1` `Widget`s (guests/testing/widget/crd.yaml): each
// reconcile merges `status.reconciles` (+1) and `status.observedGeneration`. Its watches, one
// per mapping the contract has beyond the manifest's:
//
//	kind            mapping                                              a change of it reconciles
//	ConfigMap       function (widgetsNamedBy)                            the Widgets its annotation test.reconciler.dev/widgets lists (a,b), in its namespace
//	Secret          field index spec.secretName, name                    the Widgets in its namespace whose spec.secretName names it
//	Namespace       field index spec.namespaces[*], name                 the Widgets anywhere whose spec.namespaces lists it
//	ServiceAccount  owner labels test.reconciler.dev/owner-namespace,    the Widget the labels name, in any namespace
//	                -name, selected by the name label
package export_reconciler_api_reconciler

import (
	"strings"

	"wit_component/reconciler"
)

// widgetsAnnotation is the annotation of a ConfigMap listing the Widgets (comma-separated
// names) it affects.
const widgetsAnnotation = "test.reconciler.dev/widgets"

func init() {
	core := func(kind string) reconciler.GVK { return reconciler.GVK{Version: "v1", Kind: kind} }
	widget := reconciler.GVK{Group: "test.reconciler.dev", Version: "v1", Kind: "Widget"}
	reconciler.Register(reconciler.NewManifest("watcher", widget).Watch(
		reconciler.Watch{Kind: core("ConfigMap"), Mapping: reconciler.ByFunc(widgetsNamedBy)},
		reconciler.Watch{Kind: core("Secret"), Mapping: reconciler.ByField("spec.secretName", reconciler.IndexName)},
		reconciler.Watch{Kind: core("Namespace"), Mapping: reconciler.ByField("spec.namespaces[*]", reconciler.IndexName)},
		reconciler.Watch{
			Kind:          core("ServiceAccount"),
			Mapping:       reconciler.ByOwnerLabels("test.reconciler.dev/owner-namespace", "test.reconciler.dev/owner-name"),
			LabelSelector: "test.reconciler.dev/owner-name",
		},
	), reconcile)
}

func reconcile(req *reconciler.Request) (reconciler.Action, error) {
	if req.Gone() {
		return reconciler.Action{}, nil
	}
	var widget struct {
		Metadata struct {
			Generation any `json:"generation"`
		} `json:"metadata"`
		Status struct {
			Reconciles uint64 `json:"reconciles"`
		} `json:"status"`
	}
	if err := req.Object.Decode(&widget); err != nil {
		return reconciler.Action{}, err
	}
	status := map[string]any{
		"reconciles":         widget.Status.Reconciles + 1,
		"observedGeneration": widget.Metadata.Generation,
	}
	if _, err := reconciler.PatchStatus(req.Ref, status); err != nil {
		return reconciler.Action{}, reconciler.Transientf("status write failed: %w", err)
	}
	return reconciler.Action{}, nil
}

// widgetsNamedBy is the Widgets a ConfigMap's annotation names, in its namespace; none when it
// has no such annotation (or is not an object).
func widgetsNamedBy(object *reconciler.Object) ([]reconciler.ObjectKey, error) {
	var configMap struct {
		Metadata struct {
			Namespace   string            `json:"namespace"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if object.Decode(&configMap) != nil {
		return nil, nil
	}
	var keys []reconciler.ObjectKey
	for _, name := range strings.Split(configMap.Metadata.Annotations[widgetsAnnotation], ",") {
		if name = strings.TrimSpace(name); name != "" {
			keys = append(keys, reconciler.ObjectKey{Namespace: configMap.Metadata.Namespace, Name: name})
		}
	}
	return keys, nil
}
