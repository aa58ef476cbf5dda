"""The tests of the `watches` export run against the bindings of the `watching-controller` world
(test.sh generates them apart: only that world has `wit_world.exports.watches`), with the SDK's
public fake host (`reconciler_guest.testing.FakeHost`) answering the host calls."""

import pytest

from reconciler_guest.testing import FakeHost


@pytest.fixture
def host():
    with FakeHost() as fake:
        yield fake
