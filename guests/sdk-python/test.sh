#!/usr/bin/env bash
# Unit tests of the Python SDK (src/reconciler_guest) and of the Python guests, natively, not
# under wasm: pytest (pinned below) from a virtualenv in the user's cache. Exits non-zero when a
# test fails.
#
# The SDK's tests run against the bindings componentize-py (pinned in ../lib.sh, installed by
# it) generates from ../../wit, whose host functions they replace (tests/conftest.py); one run
# per world, since componentize-py names the modules after the world's imports and exports:
#   tests/          against `network-controller`: every interface of the contract, so
#                   network_backend is tested too
#   tests/http/     against `http-controller`: the module `http` over wasi:http's resources
#                   (tests/http/conftest.py), where the contract's `types` is
#                   `reconciler_api_types`
#   tests/watches/  against `watching-controller`: the optional `watches` export
#                   (`export_watches`), which only that world has
#   tests/indexes/  against `indexing-controller`: the optional `indexes` export
#                   (`export_indexes`), which only that world has
# Then without any bindings, as a guest's author runs plain `pytest`:
#   tests/native/   the SDK imported without them, and its fake host (`reconciler_guest.testing`)
#   ../python/*/    each Python guest's own tests (test_*.py beside its app.py), one run each
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
for world in network-controller http-controller watching-controller indexing-controller; do
  "$componentize_py" -d "$repo/wit" -w "$world" bindings "$bindings/$world" >/dev/null
done

# run_pytest WORLD TESTS [pytest arguments]: the directory TESTS against WORLD's bindings (none:
# without), with TESTS' own conftest.py only (--confcutdir), so each run's fakes import only its
# world's modules.
run_pytest() {
  local world=$1 tests=$2 pythonpath="$here/src:$2"
  shift 2
  [[ "$world" == none ]] || pythonpath="$bindings/$world:$pythonpath"
  PYTHONPATH="$pythonpath" PYTHONDONTWRITEBYTECODE=1 \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider --confcutdir "$tests" "$tests" "$@"
}

run_pytest network-controller "$here/tests" --ignore "$here/tests/http" \
  --ignore "$here/tests/watches" --ignore "$here/tests/indexes" --ignore "$here/tests/native" "$@"
run_pytest http-controller "$here/tests/http" "$@"
run_pytest watching-controller "$here/tests/watches" "$@"
run_pytest indexing-controller "$here/tests/indexes" "$@"
run_pytest none "$here/tests/native" "$@"
for guest in "$repo"/guests/python/*/; do
  if compgen -G "$guest/test_*.py" >/dev/null; then
    run_pytest none "${guest%/}" "$@"
  fi
done
