import pytest
from conftest import WIDGET
from wit_world.exports import reconciler
from wit_world.imports import types

from reconciler_guest import Guest, Gvk, Manifest, SecondaryWatch, export

WIDGET_WIT = types.Gvk("test.reconciler.dev", "v1", "Widget")


def exported(manifest):
    class Fixed(Guest):
        def manifest(self):
            return manifest

        def reconcile(self, request):
            return None

    return export(Fixed)().manifest()


def test_only_name_and_primary_are_required_and_the_rest_defaults_to_neutral():
    assert exported(Manifest("widget", WIDGET)) == reconciler.ControllerManifest(
        name="widget",
        primary=WIDGET_WIT,
        namespace=None,
        label_selector=None,
        secondary=[],
        finalizer=None,
        concurrency=0,
        resync_seconds=0,
        generation_changed_only=False,
    )


def test_every_field_reaches_the_wit_manifest():
    config_map, secret = Gvk("", "v1", "ConfigMap"), Gvk("", "v1", "Secret")
    m = Manifest(
        "widget",
        WIDGET,
        namespace="demo",
        label_selector="app=web",
        secondary=[SecondaryWatch(config_map), SecondaryWatch(secret, label="widget")],
        finalizer="test.reconciler.dev/cleanup",
        concurrency=2,
        resync_seconds=60,
        generation_changed_only=True,
    )
    assert exported(m) == reconciler.ControllerManifest(
        name="widget",
        primary=WIDGET_WIT,
        namespace="demo",
        label_selector="app=web",
        secondary=[
            reconciler.SecondaryWatch(types.Gvk("", "v1", "ConfigMap"), reconciler.Mapping_Owner()),
            reconciler.SecondaryWatch(
                types.Gvk("", "v1", "Secret"), reconciler.Mapping_Label("widget")
            ),
        ],
        finalizer="test.reconciler.dev/cleanup",
        concurrency=2,
        resync_seconds=60,
        generation_changed_only=True,
    )


def test_defaults_are_not_shared_between_manifests():
    a, b = Manifest("a", WIDGET), Manifest("b", WIDGET)
    a.secondary.append(SecondaryWatch(WIDGET))
    assert b.secondary == []


def test_optional_fields_are_keyword_only_and_name_and_primary_are_checked():
    with pytest.raises(TypeError):
        Manifest("widget", WIDGET, "demo")
    with pytest.raises(TypeError):
        Manifest("widget")
    with pytest.raises(TypeError, match="primary must be a Gvk"):
        Manifest("widget", "test.reconciler.dev/v1/Widget")
    with pytest.raises(TypeError, match="non-empty str"):
        Manifest("", WIDGET)
