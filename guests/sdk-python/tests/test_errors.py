import pytest
from componentize_py_types import Err
from conftest import W1
from wit_world.imports import types

from reconciler_guest import (
    ConflictError,
    DeniedError,
    HostError,
    InvalidError,
    NotFoundError,
    OtherError,
    PermanentError,
    TransientError,
    UnavailableError,
    cluster,
)
from reconciler_guest.errors import HOST_ERRORS

CASES = [
    (types.Error_Denied, DeniedError, "denied", False),
    (types.Error_NotFound, NotFoundError, "not-found", False),
    (types.Error_Conflict, ConflictError, "conflict", True),
    (types.Error_Invalid, InvalidError, "invalid", False),
    (types.Error_Unavailable, UnavailableError, "unavailable", True),
    (types.Error_Other, OtherError, "other", True),
]


@pytest.mark.parametrize("wit_error, cls, kind, transient", CASES)
def test_each_host_error_is_raised_as_its_own_class_with_kind_and_text(
    host, wit_error, cls, kind, transient
):
    host.replies["cluster.delete"] = wit_error("ConfigMap ns/a: the text")
    with pytest.raises(cls) as raised:
        cluster.delete(W1)
    e = raised.value
    assert isinstance(e, HostError) and HOST_ERRORS[kind] is cls
    assert (e.kind, e.message, str(e)) == (
        kind,
        "ConfigMap ns/a: the text",
        f"{kind}: ConfigMap ns/a: the text",
    )


@pytest.mark.parametrize("wit_error, cls, kind, transient", CASES)
def test_retryable_host_errors_become_transient_and_the_rest_permanent(
    wit_error, cls, kind, transient
):
    mapped = cls("text").reconcile_error()
    assert type(mapped) is (TransientError if transient else PermanentError)
    assert mapped.message == f"{kind}: text"


def test_helpers_choose_the_retry_and_add_context():
    e = DeniedError("no status write grant for Widget")
    assert type(e.transient()) is TransientError
    assert (
        e.transient("status write failed").message
        == "status write failed: denied: no status write grant for Widget"
    )
    assert type(ConflictError("x").permanent()) is PermanentError
    assert ConflictError("x").reconcile_error("apply").message == "apply: conflict: x"


def test_a_host_error_escaping_reconcile_reaches_the_host_by_the_table(host):
    from conftest import W1_WIT, WIDGET
    from wit_world.exports import reconciler

    from reconciler_guest import Guest, Manifest, export

    class Writes(Guest):
        def manifest(self):
            return Manifest("writes", WIDGET)

        def reconcile(self, request):
            cluster.patch_status(request.ref, {})

    request = reconciler.Request(W1_WIT, None, False, 0)
    for wit_error, expected in [
        (types.Error_Conflict("moved"), types.ReconcileError_Transient("conflict: moved")),
        (types.Error_Invalid("bad"), types.ReconcileError_Permanent("invalid: bad")),
    ]:
        host.replies["cluster.patch_status"] = wit_error
        with pytest.raises(Err) as raised:
            export(Writes)().reconcile(request)
        assert raised.value.value == expected
