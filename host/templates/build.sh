#!/usr/bin/env bash
# Builds {{name}}.wasm from this directory{{toolchain}}. The recipe is lib.sh's:
# the same file the reconciler-host repository builds its own {{language}} guests with; it says
# what a build reads, installs and skips (a second run with nothing changed does nothing).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"
build_project_guest "{{lang}}" "$here" "{{name}}"
