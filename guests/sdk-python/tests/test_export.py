import pytest
from componentize_py_types import Err
from conftest import W1_WIT, WIDGET
from wit_world.exports import reconciler
from wit_world.imports import types

from reconciler_guest import (
    Guest,
    Gvk,
    Manifest,
    PermanentError,
    TransientError,
    Watch,
    export,
    export_watches,
)


def raising(error):
    class Raises(Guest):
        def manifest(self):
            return Manifest("raises", WIDGET)

        def reconcile(self, request):
            raise error

    return export(Raises)()


REQUEST = reconciler.Request(W1_WIT, None, False, 0)


@pytest.mark.parametrize(
    "error, expected",
    [
        (TransientError("later"), types.ReconcileError_Transient("later")),
        (PermanentError("never"), types.ReconcileError_Permanent("never")),
    ],
)
def test_reconcile_errors_reach_the_host_as_the_wit_variant(error, expected):
    with pytest.raises(Err) as raised:
        raising(error).reconcile(REQUEST)
    assert raised.value.value == expected


def test_any_other_exception_is_logged_with_where_it_was_raised_and_traps(host):
    with pytest.raises(KeyError):
        raising(KeyError("spec")).reconcile(REQUEST)
    ((level, message),) = host.logged()
    assert level == "error"
    assert message.startswith("guest reconcile raised KeyError: 'spec' at ")
    assert "test_export.py:" in message and message.endswith(" in reconcile")


def test_a_manifest_that_is_not_a_manifest_is_reported(host):
    class Wrong(Guest):
        def manifest(self):
            return {"name": "wrong"}

        def reconcile(self, request):
            return None

    with pytest.raises(TypeError):
        export(Wrong)().manifest()
    assert host.logged()[0][1].startswith(
        "guest manifest raised TypeError: manifest() must return a Manifest"
    )


def test_watches_are_refused_when_the_world_being_built_lacks_them():
    class Watching(Guest):
        def manifest(self):
            return Manifest("watching", WIDGET)

        def reconcile(self, request):
            return None

        def watches(self):
            return [Watch(Gvk("", "v1", "ConfigMap"))]

    with pytest.raises(TypeError, match="write `watching-controller` into the `wit-world` file"):
        export_watches(Watching)
