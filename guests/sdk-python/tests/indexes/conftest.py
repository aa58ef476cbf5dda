"""The tests of the `indexes` export run against the bindings of the `indexing-controller` world
(test.sh generates them apart: only that world has `wit_world.exports.indexes`), with the SDK's
public fake host (`reconciler_guest.testing.FakeHost`) answering the host calls."""

import pytest

from reconciler_guest.testing import FakeHost


@pytest.fixture
def host():
    with FakeHost() as fake:
        yield fake
