//go:build wasip1

// Part of the Go SDK (guests/sdk-go), copied into every Go guest's module: wit-bindgen's
// generated wit_exports.go calls the component's exports in this package, and this file hands
// them to the guest registered with reconciler.Register. A guest's own code may live in this
// package too, or in any other of its module.

package export_reconciler_api_reconciler

import (
	"wit_component/reconciler"
	"wit_component/reconciler_api_reconciler"
	"wit_component/reconciler_api_types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

// Manifest is the component's `manifest` export.
func Manifest() reconciler_api_reconciler.ControllerManifest {
	return reconciler.ManifestExport()
}

// Reconcile is the component's `reconcile` export.
func Reconcile(request reconciler_api_reconciler.Request) witTypes.Result[reconciler_api_types.Action, reconciler_api_types.ReconcileError] {
	return reconciler.ReconcileExport(request)
}
