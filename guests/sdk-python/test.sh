#!/usr/bin/env bash
# Unit tests of the Python SDK (src/reconciler_guest), natively, not under wasm: pytest (pinned
# below) from a virtualenv in the user's cache, against the bindings componentize-py (pinned in
# ../lib.sh, installed by it) generates from ../../wit, whose host functions the tests replace
# (tests/conftest.py). Exits non-zero when a test fails.
#
#   guests/sdk-python/test.sh [pytest arguments]
set -euo pipefail
PYTEST_VERSION=9.2.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
PROG="sdk-python/test.sh"
# shellcheck source=../lib.sh
source "$repo/guests/lib.sh"
python_toolchain # sets componentize_py

pip_tool pytest "$PYTEST_VERSION" # sets venv

bindings="$(mktemp -d "${TMPDIR:-/tmp}/sdk-python-bindings.XXXXXX")"
trap 'rm -rf "$bindings"' EXIT
# network-controller: every interface of the contract, so network_backend is tested too.
"$componentize_py" -d "$repo/wit" -w network-controller bindings "$bindings" >/dev/null

cd "$here"
PYTHONPATH="$bindings:$here/src:$here/tests" PYTHONDONTWRITEBYTECODE=1 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
