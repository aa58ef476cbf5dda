import json
from datetime import timedelta

import pytest
from conftest import W1, W1_WIT
from wit_world.imports import cluster as wit_cluster
from wit_world.imports import network_backend as wit_network
from wit_world.imports import types

from reconciler_guest import (
    ConflictError,
    Gvk,
    InvalidError,
    ObjectKey,
    OtherError,
    cluster,
    event,
    lister,
    log,
    network_backend,
    queue,
)

CONFIG_MAP = Gvk("", "v1", "ConfigMap")


def test_log_formats_like_the_logging_module_only_when_given_arguments(host):
    log.info("created %s in %s", "w1", "demo")
    log.warn("100% literal")
    log.error("%d left", 3)
    log.trace("t")
    log.debug("d")
    assert host.logged() == [
        ("info", "created w1 in demo"),
        ("warn", "100% literal"),
        ("error", "3 left"),
        ("trace", "t"),
        ("debug", "d"),
    ]


def test_events_name_the_object_type_reason_and_message(host):
    event.normal(W1, "Greeted", "hello")
    event.warning(W1, "Failed", "oops")
    assert host.calls == [
        (
            "cluster.record_event",
            (wit_cluster.Event(W1_WIT, wit_cluster.EventType.NORMAL, "Greeted", "hello"),),
        ),
        (
            "cluster.record_event",
            (wit_cluster.Event(W1_WIT, wit_cluster.EventType.WARNING, "Failed", "oops"),),
        ),
    ]


def test_normal_and_warning_events_are_best_effort_and_record_is_not(host):
    host.replies["cluster.record_event"] = types.Error_Unavailable("event rate exceeded")
    event.normal(W1, "Greeted", "hello")
    assert host.logged() == [
        (
            "warn",
            "could not record event Greeted on Widget demo/w1: unavailable: event rate exceeded",
        )
    ]
    with pytest.raises(Exception, match="event rate exceeded"):
        event.record(W1, event.EventType.NORMAL, "Greeted", "hello")


def test_enqueue_takes_a_key_or_a_ref_and_a_delay_in_seconds_or_a_timedelta(host):
    queue.enqueue(ObjectKey("demo", "w2"))
    queue.enqueue(W1, after=1.5)
    queue.enqueue(W1, after=timedelta(hours=1))
    assert host.calls == [
        ("queue.enqueue", (types.ObjectKey("demo", "w2"), None)),
        ("queue.enqueue", (types.ObjectKey("demo", "w1"), 1500)),
        ("queue.enqueue", (types.ObjectKey("demo", "w1"), 3_600_000)),
    ]
    with pytest.raises(ValueError):
        queue.enqueue(W1, after=-1)


def test_lister_reads_parse_json_and_pass_namespace_and_selector(host):
    host.replies["lister.get"] = '{"metadata":{"name":"w1"}}'
    assert lister.get(W1) == {"metadata": {"name": "w1"}}
    host.replies["lister.get"] = None
    assert lister.get(W1) is None
    host.replies["lister.list"] = ['{"a":1}', '{"b":2}']
    assert lister.list(CONFIG_MAP, "demo", "app=web,tier!=db") == [{"a": 1}, {"b": 2}]
    assert lister.list(CONFIG_MAP) == [{"a": 1}, {"b": 2}]
    assert host.calls[2:] == [
        ("lister.list", (types.Gvk("", "v1", "ConfigMap"), "demo", "app=web,tier!=db")),
        ("lister.list", (types.Gvk("", "v1", "ConfigMap"), None, None)),
    ]
    host.replies["lister.get"] = "{oops"
    with pytest.raises(OtherError, match="Widget demo/w1: the host returned text that is not JSON"):
        lister.get(W1)


def test_patch_status_sends_a_status_merge_patch_and_returns_the_object(host):
    host.replies["cluster.patch_status"] = '{"status":{"greeting":"hello, wörld"}}'
    returned = cluster.patch_status(W1, {"greeting": "hello, wörld", "gone": None})
    assert returned == {"status": {"greeting": "hello, wörld"}}
    ((name, (ref, patch)),) = host.calls
    assert (name, ref) == ("cluster.patch_status", W1_WIT)
    assert json.loads(patch) == {"status": {"greeting": "hello, wörld", "gone": None}}
    assert cluster.patch_status_raw(W1, '{"status":{}}') == host.replies["cluster.patch_status"]


def test_apply_serialises_the_object_and_refuses_what_is_not_json(host):
    host.replies["cluster.apply"] = '{"kind":"ConfigMap"}'
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
    assert cluster.apply(obj) == {"kind": "ConfigMap"}
    assert json.loads(host.calls[0][1][0]) == obj
    with pytest.raises(InvalidError, match="does not serialise"):
        cluster.apply({"data": {1, 2}})


def test_apply_with_sends_the_fields_and_the_force_asked_for_not_forcing_by_default(host):
    host.replies["cluster.apply_with"] = '{"kind":"Deployment"}'
    fields = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}
    assert cluster.apply_with(fields) == {"kind": "Deployment"}
    cluster.apply_with(fields, force=True)
    sent = [(name, json.loads(obj), options) for name, (obj, options) in host.calls]
    assert sent == [
        ("cluster.apply_with", fields, wit_cluster.ApplyOptions(force=False)),
        ("cluster.apply_with", fields, wit_cluster.ApplyOptions(force=True)),
    ]
    host.replies["cluster.apply_with"] = types.Error_Conflict(
        'Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas'
    )
    with pytest.raises(ConflictError, match=r'"kubectl": \.spec\.replicas'):
        cluster.apply_with(fields)


def test_delete_reports_whether_the_object_was_there(host):
    host.replies["cluster.delete"] = False
    assert cluster.delete(W1) is False
    assert host.calls == [("cluster.delete", (W1_WIT,))]


def test_network_backend_passes_specs_and_raises_host_errors(host):
    spec = network_backend.NetworkSpec("demo/n1", "10.10.0.0/24", "10.10.0.1")
    host.replies["network_backend.ensure"] = wit_network.NetworkStatus(
        "demo/n1", "10.10.0.0/24", "10.10.0.1", "br-n1", True
    )
    assert network_backend.ensure(spec).interface_name == "br-n1"
    host.replies["network_backend.get"] = types.Error_Invalid("id: too long")
    with pytest.raises(InvalidError, match="id: too long"):
        network_backend.get("demo/n1")
