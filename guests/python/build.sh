#!/usr/bin/env bash
# Builds every Python guest (guests/python/<name>/app.py) into target/guests/<name>-python.wasm
# with componentize-py (pinned in ../lib.sh).
# The recipe, shared with every other language and with the projects `reconciler-host new
# --lang python` writes, is in ../lib.sh; so is what a build reads and when it is skipped.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib.sh
source "$here/../lib.sh"
build_language_guests python "$here"
