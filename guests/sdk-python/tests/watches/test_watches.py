import json

import pytest
from wit_world.exports import watches as wit
from wit_world.imports import types

from reconciler_guest import (
    ComputedIndex,
    Guest,
    Gvk,
    IndexValue,
    Manifest,
    ObjectKey,
    ObjectRef,
    Watch,
    export,
    export_indexes,
    export_watches,
    lister,
)
from reconciler_guest.manifest import FieldIndex, Function, Label, Owner, OwnerLabels

MIRROR = Gvk("mirror.reconciler.dev", "v1alpha1", "Mirror")
CONFIG_MAP = Gvk("", "v1", "ConfigMap")
NAMESPACE = Gvk("", "v1", "Namespace")
CONFIG_MAP_WIT = types.Gvk("", "v1", "ConfigMap")


def guest_with(watch_list=(), mapper=None):
    class Mirrors(Guest):
        def manifest(self):
            return Manifest("mirror", MIRROR)

        def reconcile(self, request):
            return None

        def watches(self):
            return list(watch_list)

    if mapper is not None:
        Mirrors.map = lambda self, kind, obj: mapper(kind, obj)
    return Mirrors


def test_a_watch_maps_through_owner_references_everywhere_unless_told_otherwise():
    w = Watch(CONFIG_MAP)
    assert (w.mapping, w.namespace, w.label_selector) == (Owner(), None, None)


def test_each_builder_returns_a_changed_copy_and_the_last_mapping_wins():
    w = Watch(CONFIG_MAP)
    field = w.by_field("spec.source")
    assert field.mapping == FieldIndex("spec.source", IndexValue.NAME)
    assert w.mapping == Owner(), "the original is unchanged"
    assert w.by_label("app").mapping == Label("app")
    assert w.by_owner_labels("o/ns", "o/name").mapping == OwnerLabels("o/name", "o/ns")
    assert w.by_owner_labels(None, "o/name").mapping == OwnerLabels("o/name", None)
    assert w.by_function().by_owner().mapping == Owner()
    assert w.by_function().mapping == Function()
    selected = w.in_namespace("infra").selecting("o/name").by_function()
    assert (selected.namespace, selected.label_selector) == ("infra", "o/name")


def test_every_mapping_reaches_the_wit_watch():
    declared = [
        Watch(CONFIG_MAP).by_field("spec.source", IndexValue.NAME),
        Watch(NAMESPACE).by_field("spec.targetNamespaces[*]", IndexValue.NAMESPACED_NAME),
        Watch(CONFIG_MAP)
        .by_owner_labels("o/ns", "o/name")
        .selecting("o/name")
        .in_namespace("infra"),
        Watch(CONFIG_MAP).by_owner_labels(None, "o/name"),
        Watch(CONFIG_MAP).by_label("app"),
        Watch(CONFIG_MAP),
        Watch(CONFIG_MAP).by_function(),
        Watch(CONFIG_MAP).by_field("spec.ns", IndexValue.NAMESPACE),
    ]
    got = export_watches(guest_with(declared))().watches()
    ns_wit = types.Gvk("", "v1", "Namespace")
    assert got == [
        wit.Watch(
            CONFIG_MAP_WIT,
            wit.WatchMapping_Field(wit.FieldIndex("spec.source", wit.IndexValue.NAME)),
            None,
            None,
        ),
        wit.Watch(
            ns_wit,
            wit.WatchMapping_Field(
                wit.FieldIndex("spec.targetNamespaces[*]", wit.IndexValue.NAMESPACED_NAME)
            ),
            None,
            None,
        ),
        wit.Watch(
            CONFIG_MAP_WIT,
            wit.WatchMapping_OwnerLabels(wit.OwnerLabels(namespace="o/ns", name="o/name")),
            "infra",
            "o/name",
        ),
        wit.Watch(
            CONFIG_MAP_WIT,
            wit.WatchMapping_OwnerLabels(wit.OwnerLabels(namespace=None, name="o/name")),
            None,
            None,
        ),
        wit.Watch(CONFIG_MAP_WIT, wit.WatchMapping_Label("app"), None, None),
        wit.Watch(CONFIG_MAP_WIT, wit.WatchMapping_Owner(), None, None),
        wit.Watch(CONFIG_MAP_WIT, wit.WatchMapping_Function(), None, None),
        wit.Watch(
            CONFIG_MAP_WIT,
            wit.WatchMapping_Field(wit.FieldIndex("spec.ns", wit.IndexValue.NAMESPACE)),
            None,
            None,
        ),
    ]


def test_a_guest_without_watches_cannot_be_exported_with_them():
    class Plain(Guest):
        def manifest(self):
            return Manifest("plain", MIRROR)

        def reconcile(self, request):
            return None

    with pytest.raises(TypeError, match="does not override watches"):
        export_watches(Plain)
    export(Plain)  # the reconciler export alone still works


def test_wrong_watches_are_reported_with_what_was_returned(host):
    with pytest.raises(TypeError, match="must return a list of Watch"):
        export_watches(guest_with(["ConfigMap"]))().watches()
    ((level, message),) = host.logs
    assert level == "error" and message.startswith("guest watches raised TypeError")
    with pytest.raises(TypeError, match="kind must be a Gvk"):
        Watch("v1/ConfigMap")
    with pytest.raises(TypeError, match="IndexValue"):
        Watch(CONFIG_MAP).by_field("spec.source", "name")


def test_map_gets_the_kind_and_the_object_as_a_dict_and_returns_keys():
    seen = []

    def mapper(kind, obj):
        seen.append((kind, obj))
        ns = obj["metadata"]["namespace"]
        return [ObjectKey(ns, "a"), ObjectRef(MIRROR, ns, "b"), ObjectKey(None, "c")]

    obj = {"metadata": {"namespace": "demo", "name": "cm"}, "data": {"k": "ü"}}
    keys = export_watches(guest_with(mapper=mapper))().map(
        CONFIG_MAP_WIT, json.dumps(obj, ensure_ascii=False)
    )
    assert seen == [(CONFIG_MAP, obj)]
    assert keys == [
        types.ObjectKey("demo", "a"),
        types.ObjectKey("demo", "b"),
        types.ObjectKey(None, "c"),
    ]


def test_map_may_read_through_the_lister(host):
    host.load(
        {
            "apiVersion": "mirror.reconciler.dev/v1alpha1",
            "kind": "Mirror",
            "metadata": {"namespace": "demo", "name": "x"},
            "spec": {"owner": "m1"},
        }
    )

    def mapper(kind, obj):
        owner = lister.get(ObjectRef(MIRROR, "demo", "x"))["spec"]["owner"]
        return [ObjectKey("demo", owner)]

    keys = export_watches(guest_with(mapper=mapper))().map(CONFIG_MAP_WIT, "{}")
    assert keys == [types.ObjectKey("demo", "m1")]


def test_the_default_map_maps_nothing_and_says_so(host):
    keys = export_watches(guest_with([Watch(CONFIG_MAP).by_function()]))().map(
        CONFIG_MAP_WIT, "{}"
    )
    assert keys == []
    ((level, message),) = host.logs
    assert level == "error"
    assert "v1/ConfigMap" in message and "does not override map()" in message


@pytest.mark.parametrize("answer", [None, "demo/a", [("demo", "a")], ["demo/a"]])
def test_map_answers_that_are_not_keys_trap_and_are_reported(host, answer):
    with pytest.raises(TypeError, match="map\\(\\) must return"):
        export_watches(guest_with(mapper=lambda kind, obj: answer))().map(CONFIG_MAP_WIT, "{}")
    ((level, message),) = host.logs
    assert level == "error" and message.startswith("guest map raised TypeError")


def test_indexes_are_refused_when_the_world_being_built_lacks_them():
    class Indexed(Guest):
        def manifest(self):
            return Manifest("indexed", MIRROR)

        def reconcile(self, request):
            return None

        def indexes(self):
            return [ComputedIndex("configmaps", CONFIG_MAP)]

    with pytest.raises(TypeError, match="write `indexing-controller` into the `wit-world` file"):
        export_indexes(Indexed)
