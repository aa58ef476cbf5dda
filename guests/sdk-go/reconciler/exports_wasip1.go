//go:build wasip1

package reconciler

// The component's exports, in the generated bindings' types: what package
// export_reconciler_api_reconciler (reconciler_exports.go, copied into every guest) calls.

import (
	"wit_component/reconciler_api_reconciler"
	"wit_component/reconciler_api_types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

// ManifestExport is the component's `manifest` export: the registered manifest. Guests do not
// call it.
func ManifestExport() reconciler_api_reconciler.ControllerManifest {
	m := exportedManifest()
	secondary := make([]reconciler_api_reconciler.SecondaryWatch, len(m.Secondary))
	for i, watch := range m.Secondary {
		mapping := reconciler_api_reconciler.MakeMappingOwner()
		if watch.Label != "" {
			mapping = reconciler_api_reconciler.MakeMappingLabel(watch.Label)
		}
		secondary[i] = reconciler_api_reconciler.SecondaryWatch{Kind: witGVK(watch.Kind), Mapping: mapping}
	}
	return reconciler_api_reconciler.ControllerManifest{
		Name:                  m.Name,
		Primary:               witGVK(m.Primary),
		Namespace:             option(m.Namespace),
		LabelSelector:         option(m.LabelSelector),
		Secondary:             secondary,
		Finalizer:             option(m.Finalizer),
		Concurrency:           m.Concurrency,
		ResyncSeconds:         m.ResyncSeconds,
		GenerationChangedOnly: m.GenerationChangedOnly,
	}
}

// ReconcileExport is the component's `reconcile` export: the registered reconcile. Guests do
// not call it.
func ReconcileExport(request reconciler_api_reconciler.Request) witTypes.Result[reconciler_api_types.Action, reconciler_api_types.ReconcileError] {
	ref := ObjectRef{
		Kind:      GVK{Group: request.Ref.Kind.Group, Version: request.Ref.Kind.Version, Kind: request.Ref.Kind.Kind},
		Namespace: unoption(request.Ref.Namespace),
		Name:      request.Ref.Name,
	}
	req := &Request{Ref: ref, Deleting: request.Deleting, Attempt: request.Attempt}
	if request.Object.Tag() == witTypes.OptionSome {
		req.Object = &Object{text: request.Object.Some(), ref: ref}
	}
	action, err := run(req)
	if err != nil {
		permanent, message := classify(err)
		failure := reconciler_api_types.MakeReconcileErrorTransient(message)
		if permanent {
			failure = reconciler_api_types.MakeReconcileErrorPermanent(message)
		}
		return witTypes.Err[reconciler_api_types.Action](failure)
	}
	after := witTypes.None[uint64]()
	if ms, requeue := action.requeueAfterMs(); requeue {
		after = witTypes.Some(ms)
	}
	return witTypes.Ok[reconciler_api_types.Action, reconciler_api_types.ReconcileError](
		reconciler_api_types.Action{RequeueAfterMs: after})
}
