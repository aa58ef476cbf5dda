"""config-reloader's computed index and reconcile, natively on the SDK's fake host: plain
`pytest` in this directory with the SDK on the path (`guests/sdk-python/test.sh` runs it)."""

import pytest

from app import CONDITION_TYPE, HASH_ANNOTATION, INDEX, LIST_ANNOTATION, Reloader, config_hash
from reconciler_guest import ConflictError, ObjectKey, ObjectRef, TransientError
from reconciler_guest.testing import Apply, FakeHost, PatchStatus, RecordEvent

WEB = ObjectKey("shop", "web")


def deployment(listed=None, hashed=None, conditions=()):
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"namespace": "shop", "name": "web", "resourceVersion": "10"},
        "spec": {"replicas": 3, "template": {"metadata": {}}},
        "status": {"conditions": list(conditions)},
    }
    if listed is not None:
        obj["metadata"]["annotations"] = {LIST_ANNOTATION: listed}
    if hashed is not None:
        obj["spec"]["template"]["metadata"]["annotations"] = {HASH_ANNOTATION: hashed}
    return obj


def config_map(name, **data):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"namespace": "shop", "name": name},
        "data": data,
    }


@pytest.mark.parametrize(
    "listed, values",
    [
        ("b, a ,b", ["a", "b"]),  # sorted, once each
        ("settings.v2", ["settings.v2"]),
        ("a,,b", []),  # malformed: the reconcile says so; the next change indexes it again
        ("a,B_c", []),
        (None, []),  # not annotated
    ],
)
def test_a_deployment_is_indexed_by_the_configmaps_its_annotation_lists(listed, values):
    host = FakeHost()
    assert host.index(Reloader, INDEX, deployment(listed)) == values
    assert host.writes == [] and host.logs == []


def test_the_hash_of_the_listed_configmaps_is_applied_unforced_and_the_condition_set():
    host = FakeHost(deployment("b,a"), config_map("a", k="1"), config_map("b", k="2"))
    host.reconcile(Reloader, WEB)
    a, b = {"data": {"k": "1"}, "binaryData": None}, {"data": {"k": "2"}, "binaryData": None}
    digest = config_hash([("a", a), ("b", b)])
    apply, patch = host.writes
    assert apply == Apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"template": {"metadata": {"annotations": {HASH_ANNOTATION: digest}}}},
        },
        force=False,
    )
    (condition,) = patch.patch["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        CONDITION_TYPE,
        "True",
        "Hashed",
    )
    assert host.get(ObjectRef(*patch.ref))["spec"]["replicas"] == 3, "only the hash was applied"

    host.writes.clear()
    host.reconcile(Reloader, WEB)  # nothing changed: nothing written
    assert host.writes == []


def test_a_missing_configmap_keeps_the_last_hash_and_says_so():
    host = FakeHost(deployment("a,gone", hashed="old"), config_map("a", k="1"))
    host.reconcile(Reloader, WEB)
    event, patch = host.writes
    message = "ConfigMap gone not found in namespace shop; the last hash is kept"
    assert event == RecordEvent(ObjectRef(*patch.ref), "Warning", "ConfigMapNotFound", message)
    assert isinstance(patch, PatchStatus)
    assert patch.patch["status"]["conditions"][0]["message"] == message


def test_a_hash_another_manager_owns_is_not_taken_and_the_reconcile_is_retried():
    host = FakeHost(deployment("a"), config_map("a", k="1"))
    host.fail("apply_with", ConflictError('conflict with "kubectl": .spec.template'))
    with pytest.raises(TransientError, match="another field manager's"):
        host.reconcile(Reloader, WEB)
    _, event, patch = host.writes
    assert event.reason == "HashConflict"
    assert patch.patch["status"]["conditions"][0]["reason"] == "HashConflict"
