//go:build controller_runtime_v0_23

package main

import (
	"errors"

	ctrl "sigs.k8s.io/controller-runtime"
)

// readYourWrites: v0.23's client.CacheOptions has no such field (build.sh sets this file's tag
// when it builds against go.v0.23.mod).
func readYourWrites(*ctrl.Options) error {
	return errors.New("controller-runtime v0.23 has no read-your-writes mode (v0.25 added it)")
}
