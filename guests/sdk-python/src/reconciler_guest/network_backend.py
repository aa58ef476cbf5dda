"""The Network sample's backend: actual state outside Kubernetes. Only for guests built for
the `network-controller` world (a `wit-world` file beside `app.py` naming it); the package
does not import this module, so a `controller` guest never needs the interface.

Ids are the guest's own (e.g. `namespace/name`): another guest's networks are invisible to it.
"""

from __future__ import annotations

from wit_world.imports import network_backend as _wit

from . import _bindings

NetworkSpec = _wit.NetworkSpec
"""What the guest wants: `NetworkSpec(id=..., cidr="10.10.0.0/24", gateway="10.10.0.1")`."""
NetworkStatus = _wit.NetworkStatus
"""What the backend reports: `id`, `cidr`, `gateway`, `interface_name`, `up`."""


def get(id: str) -> NetworkStatus | None:
    """The network as it exists now, or `None`. Raises the host's `HostError`."""
    return _bindings.call(_wit.get, id)


def ensure(spec: NetworkSpec) -> NetworkStatus:
    """Creates the network or corrects it to match `spec`; returns the resulting state.
    `InvalidError` when the spec overlaps another network the provider holds."""
    return _bindings.call(_wit.ensure, spec)


def delete(id: str) -> bool:
    """Removes the network; `False` when it did not exist. Raises the host's `HostError`."""
    return _bindings.call(_wit.delete, id)
