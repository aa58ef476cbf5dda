//go:build wasip1

package networkbackend

import (
	"wit_component/reconciler"
	backend "wit_component/reconciler_api_network_backend"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

func init() { hostCalls = bindings{} }

type bindings struct{}

func (bindings) get(id string) (Status, bool, error) {
	got := backend.Get(id)
	if got.Tag() == witTypes.ResultErr {
		return Status{}, false, reconciler.FromWITError(got.Err())
	}
	if status := got.Ok(); status.Tag() == witTypes.OptionSome {
		return fromWIT(status.Some()), true, nil
	}
	return Status{}, false, nil
}

func (bindings) ensure(spec Spec) (Status, error) {
	ensured := backend.Ensure(backend.NetworkSpec{Id: spec.ID, Cidr: spec.CIDR, Gateway: spec.Gateway})
	if ensured.Tag() == witTypes.ResultErr {
		return Status{}, reconciler.FromWITError(ensured.Err())
	}
	return fromWIT(ensured.Ok()), nil
}

func (bindings) delete(id string) (bool, error) {
	deleted := backend.Delete(id)
	if deleted.Tag() == witTypes.ResultErr {
		return false, reconciler.FromWITError(deleted.Err())
	}
	return deleted.Ok(), nil
}

func fromWIT(s backend.NetworkStatus) Status {
	return Status{ID: s.Id, CIDR: s.Cidr, Gateway: s.Gateway, InterfaceName: s.InterfaceName, Up: s.Up}
}
