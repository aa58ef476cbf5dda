// Package networkbackend is the host's network backend (the `network-backend` interface of
// wit/reconciler.wit): actual state outside Kubernetes, for the Network sample controller. The
// provider (Linux bridges, in memory) is chosen by the host configuration.
//
// Only for guests of the `network-controller` world (a `wit-world` file beside go.mod saying
// so): importing this package makes the component import `network-backend`, which the host
// admits only with a backend grant. Host calls fail with a [reconciler.HostError].
package networkbackend

// Spec is what the guest wants.
type Spec struct {
	// Stable for the object's lifetime, e.g. `namespace/name`. Ids are the guest's own:
	// another guest's networks are invisible to it.
	ID string
	// An IPv4 or IPv6 prefix, e.g. `10.10.0.0/24`.
	CIDR string
	// An address inside CIDR, assigned to the network's interface.
	Gateway string
}

// Status is what the backend reports, read back from the real system.
type Status struct {
	ID      string
	CIDR    string
	Gateway string
	// The provider's name for it, e.g. a bridge interface name.
	InterfaceName string
	// Whether the interface is administratively up.
	Up bool
}

// imports is the backend's functions: the generated bindings in a component
// (networkbackend_wasip1.go), a fake in tests.
type imports interface {
	get(id string) (Status, bool, error)
	ensure(spec Spec) (Status, error)
	delete(id string) (bool, error)
}

// hostCalls is set by networkbackend_wasip1.go's init in a component, and by tests.
var hostCalls imports

func host() imports {
	if hostCalls == nil {
		panic("networkbackend: no host to call: the backend works only inside the component (GOOS=wasip1)")
	}
	return hostCalls
}

// Get is the network as it exists now, or nil.
func Get(id string) (*Status, error) {
	status, found, err := host().get(id)
	if err != nil || !found {
		return nil, err
	}
	return &status, nil
}

// Ensure creates the network or corrects it to match spec, and returns the resulting state.
// It fails with `invalid` when the spec overlaps another network the provider holds (or lies
// outside the ranges it allows).
func Ensure(spec Spec) (Status, error) {
	return host().ensure(spec)
}

// Delete removes the network; false when it did not exist.
func Delete(id string) (bool, error) {
	return host().delete(id)
}
