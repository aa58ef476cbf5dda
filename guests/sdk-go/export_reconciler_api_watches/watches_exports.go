//go:build wasip1

// Part of the Go SDK (guests/sdk-go), copied into a Go guest's module when its world is
// `watching-controller`: wit-bindgen's generated wit_exports.go calls the component's optional
// `watches` export in this package, and this file hands it the Watches of the manifest
// registered with reconciler.Register. The conversions to the generated types live here, not in
// package reconciler, because only this world's bindings have the package
// reconciler_api_watches.

package export_reconciler_api_watches

import (
	"wit_component/reconciler"
	"wit_component/reconciler_api_types"
	"wit_component/reconciler_api_watches"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

func init() { reconciler.ExportsWatches() }

// Watches is the component's `watches` export.
func Watches() []reconciler_api_watches.Watch {
	watches := reconciler.WatchesExport()
	out := make([]reconciler_api_watches.Watch, len(watches))
	for i, watch := range watches {
		out[i] = reconciler_api_watches.Watch{
			Kind:          reconciler_api_types.Gvk{Group: watch.Kind.Group, Version: watch.Kind.Version, Kind: watch.Kind.Kind},
			Mapping:       mapping(watch.Mapping),
			Namespace:     option(watch.Namespace),
			LabelSelector: option(watch.LabelSelector),
		}
	}
	return out
}

// Map is the component's `map` export.
func Map(kind reconciler_api_types.Gvk, object string) []reconciler_api_types.ObjectKey {
	keys := reconciler.MapExport(reconciler.GVK{Group: kind.Group, Version: kind.Version, Kind: kind.Kind}, object)
	out := make([]reconciler_api_types.ObjectKey, len(keys))
	for i, key := range keys {
		out[i] = reconciler_api_types.ObjectKey{Namespace: option(key.Namespace), Name: key.Name}
	}
	return out
}

func mapping(m reconciler.WatchMapping) reconciler_api_watches.WatchMapping {
	switch m.By {
	case reconciler.MapLabel:
		return reconciler_api_watches.MakeWatchMappingLabel(m.Label)
	case reconciler.MapOwnerLabels:
		return reconciler_api_watches.MakeWatchMappingOwnerLabels(reconciler_api_watches.OwnerLabels{
			Namespace: option(m.NamespaceLabel), Name: m.Label,
		})
	case reconciler.MapField:
		return reconciler_api_watches.MakeWatchMappingField(reconciler_api_watches.FieldIndex{
			Field: m.Field.Field, Value: reconciler_api_watches.IndexValue(m.Field.Value),
		})
	case reconciler.MapFunction:
		return reconciler_api_watches.MakeWatchMappingFunction()
	default: // reconciler.MapOwner; WatchesExport refused any other
		return reconciler_api_watches.MakeWatchMappingOwner()
	}
}

// option is the contract's option<string>: "" is none.
func option(value string) witTypes.Option[string] {
	if value == "" {
		return witTypes.None[string]()
	}
	return witTypes.Some(value)
}
