"""The tests run natively against the bindings componentize-py generates from wit/ (test.sh
puts them on the path), with the host's side of every import replaced by `FakeHost`. They pin
what crosses the boundary (the generated records), so this fake replaces the generated import
functions themselves; the public `reconciler_guest.testing.FakeHost` answers above them, with
the SDK's values (tests/watches, tests/indexes and tests/native use that one)."""

import pytest
from componentize_py_types import Err
from wit_world.imports import cluster, lister, log, network_backend, queue, types

from reconciler_guest import Gvk, ObjectRef

WIDGET = Gvk("test.reconciler.dev", "v1", "Widget")
W1 = ObjectRef(WIDGET, "demo", "w1")
W1_WIT = types.ObjectRef(types.Gvk("test.reconciler.dev", "v1", "Widget"), "demo", "w1")


class FakeHost:
    """Records each import call as `(function, args)` and answers from `replies`: a value is
    returned, a WIT error value (`types.Error_*`) is raised as the bindings raise it."""

    def __init__(self):
        self.calls = []
        self.replies = {}

    def function(self, name):
        def call(*args):
            self.calls.append((name, args))
            reply = self.replies.get(name)
            if isinstance(
                reply,
                (
                    types.Error_Denied,
                    types.Error_NotFound,
                    types.Error_Conflict,
                    types.Error_Invalid,
                    types.Error_Unavailable,
                    types.Error_Other,
                ),
            ):
                raise Err(reply)
            return reply

        return call

    def logged(self):
        """The log lines, as `(level name, message)`."""
        return [(args[0].name.lower(), args[1]) for name, args in self.calls if name == "log.log"]


@pytest.fixture
def host(monkeypatch):
    fake = FakeHost()
    for module, names in [
        (cluster, ["patch_status", "apply", "apply_with", "delete", "record_event"]),
        (lister, ["get", "list"]),
        (queue, ["enqueue"]),
        (log, ["log"]),
        (network_backend, ["get", "ensure", "delete"]),
    ]:
        short = module.__name__.rsplit(".", 1)[1]
        for name in names:
            monkeypatch.setattr(module, name, fake.function(f"{short}.{name}"))
    return fake
