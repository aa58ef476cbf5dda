import json
from datetime import timedelta

import pytest
from conftest import W1, W1_WIT, WIDGET
from wit_world.exports import reconciler
from wit_world.imports import types

from reconciler_guest import (
    Action,
    Guest,
    Gvk,
    Manifest,
    ObjectKey,
    ObjectRef,
    PermanentError,
    Request,
    export,
)


def test_the_object_is_parsed_on_first_use_only_and_once():
    request = Request(W1, "not json")
    assert (request.key, request.deleting, request.attempt) == (ObjectKey("demo", "w1"), False, 0)
    with pytest.raises(PermanentError, match="Widget demo/w1: the object is not JSON"):
        _ = request.object

    request = Request(W1, json.dumps({"metadata": {"name": "w1"}}), deleting=True, attempt=2)
    first = request.object
    assert first == {"metadata": {"name": "w1"}}
    assert request.object is first
    assert Request(W1, None).object is None
    with pytest.raises(PermanentError, match="not a JSON object"):
        _ = Request(W1, "[1]").object


def test_the_exported_reconcile_hands_over_ref_object_deletion_and_attempt():
    seen = []

    class Records(Guest):
        def manifest(self):
            return Manifest("records", WIDGET)

        def reconcile(self, request):
            seen.append(request)

    wit_request = reconciler.Request(W1_WIT, '{"spec":{}}', True, 3)
    assert export(Records)().reconcile(wit_request) == types.Action(requeue_after_ms=None)
    (request,) = seen
    assert (request.ref, request.raw, request.deleting, request.attempt) == (
        W1,
        '{"spec":{}}',
        True,
        3,
    )
    assert request.object == {"spec": {}}


@pytest.mark.parametrize(
    "action, millis",
    [
        (None, None),
        (Action.await_change(), None),
        (Action.requeue(30), 30_000),
        (Action.requeue(0.0015), 2),  # rounded up: "not before"
        (Action.requeue(timedelta(minutes=1)), 60_000),
    ],
)
def test_actions_say_when_to_come_back_in_milliseconds(action, millis):
    class Returns(Guest):
        def manifest(self):
            return Manifest("returns", WIDGET)

        def reconcile(self, request):
            return action

    got = export(Returns)().reconcile(reconciler.Request(W1_WIT, None, False, 0))
    assert got == types.Action(requeue_after_ms=millis)


def test_names_read_like_kubernetes():
    assert Gvk.from_api_version("v1", "ConfigMap") == Gvk("", "v1", "ConfigMap")
    assert Gvk("", "v1", "ConfigMap").api_version == "v1"
    assert (
        Gvk.from_api_version("samplecrd.k8s.io/v1", "Network").api_version == "samplecrd.k8s.io/v1"
    )
    assert str(W1) == "Widget demo/w1"
    assert str(ObjectRef(Gvk("", "v1", "Namespace"), None, "ns")) == "Namespace ns"
    assert W1.sibling("w2") == ObjectRef(WIDGET, "demo", "w2")
    assert (
        ObjectRef.from_json(
            {
                "apiVersion": "test.reconciler.dev/v1",
                "kind": "Widget",
                "metadata": {"namespace": "demo", "name": "w1"},
            }
        )
        == W1
    )
    assert (
        ObjectRef.from_json(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}
        ).namespace
        is None
    )
    assert ObjectRef.from_json({"kind": "X"}) is None


def test_calls_about_the_requests_object_hand_the_hosts_record_back_and_others_convert(host):
    from reconciler_guest import cluster, queue

    class Writes(Guest):
        def manifest(self):
            return Manifest("writes", WIDGET)

        def reconcile(self, request):
            cluster.patch_status(request.ref, {})
            cluster.patch_status(request.ref.sibling("w2"), {})
            queue.enqueue(request.key)

    host.replies["cluster.patch_status"] = "{}"
    wit_request = reconciler.Request(W1_WIT, None, False, 0)
    export(Writes)().reconcile(wit_request)
    (_, (first, _)), (_, (second, _)), (_, (key, _)) = host.calls
    assert first is wit_request.ref
    assert second == types.ObjectRef(W1_WIT.kind, "demo", "w2")
    assert key == types.ObjectKey("demo", "w1")
