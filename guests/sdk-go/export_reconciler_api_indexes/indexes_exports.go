//go:build wasip1

// Part of the Go SDK (guests/sdk-go), copied into a Go guest's module when its world is
// `indexing-controller`: wit-bindgen's generated wit_exports.go calls the component's optional
// `indexes` export in this package, and this file hands it the ByIndex watches of the manifest
// registered with reconciler.Register. The conversions to the generated types live here, not in
// package reconciler, because only this world's bindings have the package
// reconciler_api_indexes.

package export_reconciler_api_indexes

import (
	"wit_component/reconciler"
	"wit_component/reconciler_api_indexes"
	"wit_component/reconciler_api_types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

func init() { reconciler.ExportsIndexes() }

// Indexes is the component's `indexes` export.
func Indexes() []reconciler_api_indexes.ComputedIndex {
	watches := reconciler.IndexesExport()
	out := make([]reconciler_api_indexes.ComputedIndex, len(watches))
	for i, watch := range watches {
		out[i] = reconciler_api_indexes.ComputedIndex{
			Name:          watch.Mapping.Index,
			Kind:          reconciler_api_types.Gvk{Group: watch.Kind.Group, Version: watch.Kind.Version, Kind: watch.Kind.Kind},
			Lookup:        reconciler_api_indexes.Lookup(watch.Mapping.Field.Value),
			Namespace:     option(watch.Namespace),
			LabelSelector: option(watch.LabelSelector),
		}
	}
	return out
}

// Index is the component's `index` export.
func Index(name string, primary string) []string {
	return reconciler.IndexExport(name, primary)
}

// option is the contract's option<string>: "" is none.
func option(value string) witTypes.Option[string] {
	if value == "" {
		return witTypes.None[string]()
	}
	return witTypes.Some(value)
}
