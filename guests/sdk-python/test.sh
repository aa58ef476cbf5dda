#!/usr/bin/env bash
# Unit tests of the Python SDK (src/reconciler_guest), natively, not under wasm: pytest (pinned
# below) from a virtualenv in the user's cache, against the bindings componentize-py (pinned in
# ../lib.sh, installed by it) generates from ../../wit, whose host functions the tests replace
# (tests/conftest.py). Exits non-zero when a test fails.
#
# Three runs, one per world, since componentize-py names the modules after the world's imports
# and exports:
#   tests/          against `network-controller`: every interface of the contract, so
#                   network_backend is tested too
#   tests/http/     against `http-controller`: the module `http` over wasi:http's resources
#                   (tests/http/conftest.py), where the contract's `types` is
#                   `reconciler_api_types`
#   tests/watches/  against `watching-controller`: the optional `watches` export
#                   (`export_watches`), which only that world has
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
for world in network-controller http-controller watching-controller; do
  "$componentize_py" -d "$repo/wit" -w "$world" bindings "$bindings/$world" >/dev/null
done

# run_pytest WORLD TESTS [pytest arguments]: TESTS against WORLD's bindings, with TESTS' own
# conftest.py only (--confcutdir), so each run's fakes import only its world's modules.
run_pytest() {
  local world=$1 tests=$2
  shift 2
  PYTHONPATH="$bindings/$world:$here/src:$here/$tests" PYTHONDONTWRITEBYTECODE=1 \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider --confcutdir "$tests" "$tests" "$@"
}

cd "$here"
run_pytest network-controller tests --ignore tests/http --ignore tests/watches "$@"
run_pytest http-controller tests/http "$@"
run_pytest watching-controller tests/watches "$@"
