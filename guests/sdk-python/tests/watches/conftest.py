"""The tests of the `watches` export run against the bindings of the `watching-controller` world
(test.sh generates them apart: only that world has `wit_world.exports.watches`), with the
host's `log` and `lister` replaced by fakes that record each call."""

import pytest
from wit_world.imports import lister, log


class FakeHost:
    """Records each call as `(function, args)` and answers from `replies`."""

    def __init__(self):
        self.calls = []
        self.replies = {}

    def function(self, name):
        def call(*args):
            self.calls.append((name, args))
            return self.replies.get(name)

        return call

    def logged(self):
        """The log lines, as `(level name, message)`."""
        return [(args[0].name.lower(), args[1]) for name, args in self.calls if name == "log.log"]


@pytest.fixture
def host(monkeypatch):
    fake = FakeHost()
    monkeypatch.setattr(log, "log", fake.function("log.log"))
    for name in ["get", "list"]:
        monkeypatch.setattr(lister, name, fake.function(f"lister.{name}"))
    return fake
