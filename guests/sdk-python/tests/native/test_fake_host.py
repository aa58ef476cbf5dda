"""The SDK without generated bindings, as a guest author's plain `pytest` imports it, and its
public fake host (`reconciler_guest.testing.FakeHost`). test.sh runs this directory with no
bindings on the path."""

import json
import os
import subprocess
import sys

import pytest

from reconciler_guest import (
    Action,
    ConflictError,
    ComputedIndex,
    DeniedError,
    Guest,
    Gvk,
    InvalidError,
    Manifest,
    NotFoundError,
    ObjectKey,
    ObjectRef,
    PermanentError,
    TransientError,
    UnavailableError,
    Watch,
    cluster,
    event,
    lister,
    log,
    queue,
)
from reconciler_guest.testing import (
    Apply,
    Delete,
    Enqueue,
    FakeHost,
    Log,
    PatchStatus,
    RecordEvent,
)

WIDGET = Gvk("test.reconciler.dev", "v1", "Widget")
CONFIG_MAP = Gvk("", "v1", "ConfigMap")
NAMESPACE = Gvk("", "v1", "Namespace")


def config_map(namespace, name, labels=None, **fields):
    metadata = {"namespace": namespace, "name": name}
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, **fields}


def widget(name, **metadata):
    return {
        "apiVersion": "test.reconciler.dev/v1",
        "kind": "Widget",
        "metadata": {"namespace": "demo", "name": name, "resourceVersion": "7", **metadata},
        "spec": {"message": "hi"},
    }


def names(objects):
    return [(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]


def test_the_sdk_imports_without_bindings_and_leaves_its_testing_module_out():
    probe = (
        "import sys, reconciler_guest; "
        "print(reconciler_guest._bindings.GENERATED, 'reconciler_guest.testing' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=os.environ, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "False"]


def test_a_host_call_without_a_fake_host_says_how_to_get_one():
    with pytest.raises(RuntimeError, match=r"with reconciler_guest\.testing\.FakeHost"):
        lister.get(ObjectRef(WIDGET, "demo", "w1"))


def test_reads_answer_copies_of_the_objects_it_holds_by_kind_namespace_and_name():
    held = FakeHost(widget("w1"), config_map("demo", "w1"))
    with held:
        got = lister.get(ObjectRef(WIDGET, "demo", "w1"))
        assert got["spec"] == {"message": "hi"}
        got["spec"]["message"] = "changed"
        assert lister.get(ObjectRef(WIDGET, "demo", "w1"))["spec"] == {"message": "hi"}
        assert lister.get(ObjectRef(WIDGET, "other", "w1")) is None
        v2 = Gvk("test.reconciler.dev", "v2", "Widget")
        assert lister.get(ObjectRef(v2, "demo", "w1")) is None
        assert lister.get(ObjectRef(CONFIG_MAP, "demo", "w1"))["kind"] == "ConfigMap"


def test_a_list_takes_one_namespace_or_all_sorted_by_namespace_then_name():
    host = FakeHost(
        config_map("b", "x"),
        config_map("a", "z"),
        config_map("a", "y"),
        widget("w1"),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}},
    )
    with host:
        assert names(lister.list(CONFIG_MAP)) == [("a", "y"), ("a", "z"), ("b", "x")]
        assert names(lister.list(CONFIG_MAP, "a")) == [("a", "y"), ("a", "z")]
        assert names(lister.list(CONFIG_MAP, "none")) == []
        assert names(lister.list(NAMESPACE)) == [(None, "a")]


LABELLED = [
    config_map("ns", "web", {"app": "web", "tier": "front"}),
    config_map("ns", "db", {"app": "db", "tier": "back", "legacy": ""}),
    config_map("ns", "bare"),
]


@pytest.mark.parametrize(
    "selector, selected",
    [
        ("", ["bare", "db", "web"]),
        ("app=web", ["web"]),
        ("app==web", ["web"]),
        ("app!=web", ["bare", "db"]),  # a missing label is not equal
        ("app", ["db", "web"]),
        ("!app", ["bare"]),
        ("legacy", ["db"]),  # an empty value is a value
        ("legacy=", ["db"]),
        ("app in (web, db)", ["db", "web"]),
        ("app notin (web)", ["bare", "db"]),  # a missing label is in no set
        ("app in (web),tier=back", []),
        (" app = web , !legacy ", ["web"]),
        ("example.com/owner", []),
    ],
)
def test_a_label_selector_selects_as_the_hosts_does(selector, selected):
    with FakeHost(*LABELLED):
        assert [n for _, n in names(lister.list(CONFIG_MAP, None, selector))] == selected


@pytest.mark.parametrize(
    "selector, says",
    [
        ("a=b,", "at byte 4: expected a label key, found the end of the selector"),
        ("a in x", "expected '(' after in/notin"),
        ("a in (x", "unclosed value list"),
        ("a>1", "operator '>' is not supported"),
        ("a b", "expected an operator"),
        ("a=b_", 'label value "b_" is invalid'),
        ("Example.com/a", "invalid prefix"),
        ("tab\tbed", "may not contain \\t"),
    ],
)
def test_a_bad_label_selector_is_the_sdks_invalid_error_saying_where(selector, says):
    with FakeHost(*LABELLED), pytest.raises(InvalidError) as raised:
        lister.list(CONFIG_MAP, None, selector)
    assert raised.value.message.startswith("label-selector: ")
    assert says in raised.value.message


def test_a_status_patch_is_merged_recorded_and_read_back_with_a_new_resource_version():
    ref = ObjectRef(WIDGET, "demo", "w1")
    host = FakeHost(widget("w1", resourceVersion="2000"))
    host.load(widget("w0"))
    with host:
        cluster.patch_status(ref, {"phase": "Ready", "conditions": [{"type": "A"}]})
        returned = cluster.patch_status(ref, {"phase": None, "conditions": [{"type": "B"}]})
        assert lister.get(ref) == returned
    assert returned["status"] == {"conditions": [{"type": "B"}]}  # removed; a list replaced
    assert returned["metadata"]["resourceVersion"] == "2002"  # above every held one
    assert returned["spec"] == {"message": "hi"}
    assert host.writes == [
        PatchStatus(ref, {"status": {"phase": "Ready", "conditions": [{"type": "A"}]}}),
        PatchStatus(ref, {"status": {"phase": None, "conditions": [{"type": "B"}]}}),
    ]


def test_a_status_patch_is_refused_as_the_host_refuses_it_and_recorded_all_the_same():
    ref = ObjectRef(WIDGET, "demo", "w1")
    host = FakeHost(widget("w1"))
    with host:
        with pytest.raises(NotFoundError):
            cluster.patch_status(ref.sibling("gone"), {})
        with pytest.raises(InvalidError, match="patch.metadata.labels: a status patch"):
            cluster.patch_status_raw(ref, '{"metadata":{"labels":{"a":"b"}}}')
        with pytest.raises(InvalidError, match="patch.spec"):
            cluster.patch_status_raw(ref, '{"spec":{}}')
        with pytest.raises(InvalidError, match="patch: not JSON"):
            cluster.patch_status_raw(ref, "{oops")
        with pytest.raises(ConflictError, match="has been modified"):
            cluster.patch_status_raw(ref, '{"metadata":{"resourceVersion":"6"},"status":{}}')
        cluster.patch_status_raw(ref, '{"metadata":{"resourceVersion":"7"},"status":{"a":1}}')
    assert len(host.writes) == 5
    assert host.get(ref)["status"] == {"a": 1}


def test_an_apply_creates_or_merges_and_preconditions_hold():
    host = FakeHost(config_map("demo", "a", data={"k": "v", "old": "x"}))
    with host:
        applied = cluster.apply(config_map("demo", "a", data={"k": "w", "old": None}))
        assert applied["data"] == {"k": "w"}
        cluster.apply_with(config_map("other", "b", {"app": "web"}))
        cluster.apply_with({**config_map("other", "b"), "data": {"k": "v"}}, force=True)
        with pytest.raises(InvalidError, match="needs apiVersion, kind and metadata.name"):
            cluster.apply({"kind": "ConfigMap", "metadata": {"name": "c"}})
        stale = config_map("demo", "a")
        stale["metadata"]["resourceVersion"] = "1"
        with pytest.raises(ConflictError, match="has been modified"):
            cluster.apply(stale)
        with pytest.raises(ConflictError, match="no existing object"):
            cluster.apply({**config_map("demo", "new"), "metadata": {"name": "new", "uid": "u"}})
        with pytest.raises(InvalidError, match="does not serialise"):
            cluster.apply({**config_map("demo", "a"), "data": {1, 2}})
    assert host.get(ObjectRef(CONFIG_MAP, "other", "b"))["data"] == {"k": "v"}
    assert host.get(ObjectRef(CONFIG_MAP, "other", "b"))["metadata"]["labels"] == {"app": "web"}
    assert [(type(w).__name__, getattr(w, "force", None)) for w in host.writes] == [
        ("Apply", True),
        ("Apply", False),
        ("Apply", True),
        ("Apply", True),
        ("Apply", True),
        ("Apply", True),
    ]


def test_deletes_events_enqueues_and_logs_are_recorded_in_order():
    ref = ObjectRef(CONFIG_MAP, "demo", "a")
    host = FakeHost(config_map("demo", "a"))
    with host:
        assert cluster.delete(ref) is True
        assert cluster.delete(ref) is False
        event.warning(ref, "Gone", "deleted")
        event.record(ref, event.EventType.NORMAL, "Seen", "twice")
        queue.enqueue(ref, after=1.5)
        queue.enqueue(ObjectKey("demo", "b"))
        log.info("done with %s", ref)
    assert host.get(ref) is None
    assert host.writes == [
        Delete(ref),
        Delete(ref),
        RecordEvent(ref, "Warning", "Gone", "deleted"),
        RecordEvent(ref, "Normal", "Seen", "twice"),
        Enqueue(ObjectKey("demo", "a"), 1500),
        Enqueue(ObjectKey("demo", "b"), None),
    ]
    assert host.logs == [Log("info", "done with ConfigMap demo/a")]


def test_a_failure_set_for_a_function_is_raised_by_each_call_until_it_is_ended():
    ref = ObjectRef(CONFIG_MAP, "demo", "a")
    host = FakeHost(config_map("demo", "a"))
    host.fail("record_event", UnavailableError("event rate exceeded"))
    host.fail("get", UnavailableError("cache not synced"))
    with host:
        event.normal(ref, "Seen", "once")  # best effort: logged
        with pytest.raises(UnavailableError, match="cache not synced"):
            lister.get(ref)
        host.fail("get", None)
        assert lister.get(ref) is not None
    assert host.logs == [
        (
            "warn",
            "could not record event Seen on ConfigMap demo/a: unavailable: event rate exceeded",
        )
    ]
    with pytest.raises(ValueError, match="no host function 'patch'"):
        host.fail("patch", ConflictError("x"))


def test_objects_load_from_dicts_json_lists_and_list_kinds_and_must_be_objects():
    host = FakeHost(
        json.dumps(config_map("a", "1")),
        [config_map("a", "2")],
        {"apiVersion": "v1", "kind": "ConfigMapList", "items": [config_map("a", "3")]},
    )
    assert names(host.list(CONFIG_MAP)) == [("a", "1"), ("a", "2"), ("a", "3")]
    with pytest.raises(ValueError, match="needs apiVersion, kind and metadata.name"):
        host.load({"kind": "ConfigMap"})


def test_fake_hosts_nest_and_the_outer_one_answers_again():
    ref = ObjectRef(CONFIG_MAP, "demo", "a")
    with FakeHost(config_map("demo", "a")) as outer:
        with FakeHost() as inner:
            assert lister.get(ref) is None
        assert lister.get(ref) is not None
    assert inner.writes == outer.writes == []
    with pytest.raises(RuntimeError):
        lister.get(ref)


class Widgets(Guest):
    """Writes its status from the spec, and fails as the spec asks."""

    def manifest(self):
        return Manifest("widgets", WIDGET)

    def watches(self):
        return [Watch(CONFIG_MAP).by_function()]

    def indexes(self):
        return [ComputedIndex("configmaps", CONFIG_MAP)]

    def reconcile(self, request):
        if request.object is None:
            return Action.requeue(5)
        mode = request.object["spec"].get("mode")
        if mode == "conflict":
            cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
        if mode == "denied":
            raise DeniedError("no grant")
        status = {"deleting": request.deleting, "attempt": request.attempt}
        cluster.patch_status(request.ref, status)
        return None

    def map(self, kind, obj):
        owner = lister.get(ObjectRef(WIDGET, "demo", obj["metadata"]["name"]))
        if obj["metadata"].get("labels", {}).get("write"):
            queue.enqueue(ObjectKey("demo", "x"))
        return [] if owner is None else [ObjectRef.from_json(owner)]

    def index(self, name, primary):
        log.debug("indexing %s", primary["metadata"]["name"])
        if primary["metadata"].get("labels", {}).get("read"):
            lister.get(ObjectRef(CONFIG_MAP, "demo", "a"))
        return [primary["metadata"]["name"]]


def test_reconcile_runs_the_guest_on_the_held_object_as_the_host_would():
    host = FakeHost(widget("w1"), widget("old", deletionTimestamp="2026-01-01T00:00:00Z"))
    assert host.reconcile(Widgets, ObjectKey("demo", "w1"), attempt=2) == Action()
    assert host.get(ObjectRef(WIDGET, "demo", "w1"))["status"] == {"deleting": False, "attempt": 2}
    host.reconcile(Widgets, ObjectRef(WIDGET, "demo", "old"))
    assert host.get(ObjectRef(WIDGET, "demo", "old"))["status"]["deleting"] is True
    assert host.reconcile(Widgets, ObjectKey("demo", "gone")) == Action.requeue(5)
    with pytest.raises(ValueError, match="not of Widgets's primary kind"):
        host.reconcile(Widgets, ObjectRef(CONFIG_MAP, "demo", "w1"))


def test_a_host_error_escaping_reconcile_becomes_the_reconcile_error_the_sdk_makes():
    host = FakeHost(
        {**widget("c"), "spec": {"mode": "conflict"}}, {**widget("d"), "spec": {"mode": "denied"}}
    )
    host.fail("apply", ConflictError("conflict with kubectl"))
    with pytest.raises(TransientError, match="conflict: conflict with kubectl"):
        host.reconcile(Widgets, ObjectKey("demo", "c"))
    with pytest.raises(PermanentError, match="denied: no grant"):
        host.reconcile(Widgets, ObjectKey("demo", "d"))


def test_map_reads_through_the_lister_and_may_not_write():
    host = FakeHost(widget("w1"))
    assert host.map(Widgets, CONFIG_MAP, config_map("demo", "w1")) == [ObjectKey("demo", "w1")]
    assert host.map(Widgets, CONFIG_MAP, json.dumps(config_map("demo", "w2"))) == []
    with pytest.raises(DeniedError, match=r"only the lister is available in map\(\)"):
        host.map(Widgets, CONFIG_MAP, config_map("demo", "w1", {"write": "yes"}))
    with pytest.raises(ValueError, match="no by_function"):
        host.map(Widgets, NAMESPACE, {})


def test_index_computes_from_the_primary_alone_with_only_log_answering():
    host = FakeHost(config_map("demo", "a"))
    assert host.index(Widgets, "configmaps", widget("w1")) == ["w1"]
    assert host.logs == [("debug", "indexing w1")]
    with pytest.raises(DeniedError, match=r"host calls are not available in index\(\)"):
        host.index(Widgets, "configmaps", widget("w2", labels={"read": "yes"}))
    with pytest.raises(ValueError, match="declares no index 'secrets'"):
        host.index(Widgets, "secrets", widget("w1"))
