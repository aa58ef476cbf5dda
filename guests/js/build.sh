#!/usr/bin/env bash
# Builds every JavaScript guest (guests/js/<name>/app.js) into target/guests/<name>-js.wasm with
# jco's QuickJS backend, pinned by package.json and package-lock.json here.
# The recipe, shared with every other language and with the projects `reconciler-host new
# --lang js` writes, is in ../lib.sh; so is what a build reads and when it is skipped.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib.sh
source "$here/../lib.sh"
build_language_guests js "$here"
