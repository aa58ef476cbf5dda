#!/usr/bin/env bash
# Builds {{name}}.wasm from this directory with the {{language}} recipe of lib.sh: the same file
# the reconciler-host repository builds its own guests with. It says what a build reads, installs
# and skips (a second run with nothing changed does nothing).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"
build_project_guest "{{lang}}" "$here" "{{name}}"
