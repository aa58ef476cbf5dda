//go:build !controller_runtime_v0_23

package main

import (
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// readYourWrites turns on the read-your-writes mode v0.25 added: the manager's client records
// the resourceVersion each of its writes returns, and a later Get of that object (a List, of
// that kind) waits until the cache has seen it. The manager fills in the cache as the reader.
func readYourWrites(options *ctrl.Options) error {
	options.Client.Cache = &client.CacheOptions{EnableReadYourWritesConsistency: ptr.To(true)}
	return nil
}
