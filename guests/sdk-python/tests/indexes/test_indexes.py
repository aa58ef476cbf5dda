import json

import pytest
from wit_world.exports import indexes as wit
from wit_world.imports import types

from reconciler_guest import (
    ComputedIndex,
    Guest,
    Gvk,
    IndexValue,
    Manifest,
    export,
    export_indexes,
    export_watches,
)

DEPLOYMENT = Gvk("apps", "v1", "Deployment")
CONFIG_MAP = Gvk("", "v1", "ConfigMap")
CONFIG_MAP_WIT = types.Gvk("", "v1", "ConfigMap")
LIST = "reloader.example/configmaps"


def guest_with(index_list=(), values=None):
    class Reloader(Guest):
        def manifest(self):
            return Manifest("config-reloader", DEPLOYMENT)

        def reconcile(self, request):
            return None

        def indexes(self):
            return list(index_list)

    if values is not None:
        Reloader.index = lambda self, name, primary: values(name, primary)
    return Reloader


def test_a_computed_index_looks_up_names_everywhere_unless_told_otherwise():
    i = ComputedIndex("configmaps", CONFIG_MAP)
    assert (i.lookup, i.namespace, i.label_selector) == (IndexValue.NAME, None, None)
    changed = i.by(IndexValue.NAMESPACED_NAME).in_namespace("apps").selecting("app=web")
    assert (changed.lookup, changed.namespace, changed.label_selector) == (
        IndexValue.NAMESPACED_NAME,
        "apps",
        "app=web",
    )
    assert i.lookup == IndexValue.NAME, "the original is unchanged"
    assert ComputedIndex("c", CONFIG_MAP, IndexValue.NAMESPACE, namespace="x").namespace == "x"


def test_every_field_reaches_the_wit_computed_index():
    declared = [
        ComputedIndex("configmaps", CONFIG_MAP),
        ComputedIndex("namespaces", Gvk("", "v1", "Namespace"), IndexValue.NAMESPACE),
        ComputedIndex("secrets", Gvk("", "v1", "Secret"))
        .by(IndexValue.NAMESPACED_NAME)
        .in_namespace("infra")
        .selecting("app"),
    ]
    assert export_indexes(guest_with(declared))().indexes() == [
        wit.ComputedIndex("configmaps", CONFIG_MAP_WIT, wit.Lookup.NAME, None, None),
        wit.ComputedIndex(
            "namespaces", types.Gvk("", "v1", "Namespace"), wit.Lookup.NAMESPACE, None, None
        ),
        wit.ComputedIndex(
            "secrets", types.Gvk("", "v1", "Secret"), wit.Lookup.NAMESPACED_NAME, "infra", "app"
        ),
    ]


def test_index_gets_the_name_and_the_primary_as_a_dict_and_returns_its_values():
    seen = []

    def values(name, primary):
        seen.append((name, primary))
        return primary["metadata"]["annotations"][LIST].split(",")

    primary = {"metadata": {"name": "web", "annotations": {LIST: "a,ü"}}}
    exported = export_indexes(guest_with([ComputedIndex("configmaps", CONFIG_MAP)], values))()
    assert exported.index("configmaps", json.dumps(primary, ensure_ascii=False)) == ["a", "ü"]
    assert seen == [("configmaps", primary)]


def test_a_guest_without_indexes_cannot_be_exported_with_them():
    class Plain(Guest):
        def manifest(self):
            return Manifest("plain", DEPLOYMENT)

        def reconcile(self, request):
            return None

    with pytest.raises(TypeError, match="does not override indexes"):
        export_indexes(Plain)
    export(Plain)  # the reconciler export alone still works


def test_a_guest_with_indexes_alone_binds_no_watches():
    with pytest.raises(TypeError, match="does not override watches"):
        export_watches(guest_with([ComputedIndex("configmaps", CONFIG_MAP)]))


def test_the_default_index_computes_nothing_and_says_so(host):
    exported = export_indexes(guest_with([ComputedIndex("configmaps", CONFIG_MAP)]))()
    assert exported.index("configmaps", "{}") == []
    ((level, message),) = host.logs
    assert level == "error"
    assert "index was called for configmaps" in message and "does not override index()" in message


@pytest.mark.parametrize("answer", [None, "a,b", [1], ["a", None]])
def test_index_answers_that_are_not_strings_trap_and_are_reported(host, answer):
    exported = export_indexes(guest_with([ComputedIndex("c", CONFIG_MAP)], lambda n, p: answer))()
    with pytest.raises(TypeError, match=r"index\(\) must return a list of str"):
        exported.index("c", "{}")
    ((level, message),) = host.logs
    assert level == "error" and message.startswith("guest index raised TypeError")


def test_wrong_indexes_are_reported_with_what_was_returned(host):
    with pytest.raises(TypeError, match="must return a list of ComputedIndex"):
        export_indexes(guest_with(["configmaps"]))().indexes()
    ((level, message),) = host.logs
    assert level == "error" and message.startswith("guest indexes raised TypeError")
    with pytest.raises(TypeError, match="kind must be a Gvk"):
        ComputedIndex("configmaps", "v1/ConfigMap")
    with pytest.raises(TypeError, match="lookup must be an IndexValue"):
        ComputedIndex("configmaps", CONFIG_MAP, "name")
    with pytest.raises(TypeError, match="non-empty str"):
        ComputedIndex("", CONFIG_MAP)
    with pytest.raises(TypeError):
        ComputedIndex("configmaps", CONFIG_MAP, IndexValue.NAME, "apps")  # keyword-only
