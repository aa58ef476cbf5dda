#!/usr/bin/env bash
# Builds every C guest (guests/c/<name>/*.c) into target/guests/<name>-c.wasm with Debian's
# clang-19 and wasi-libc (installed when missing) and `reconciler-host componentize`
# (tools/componentize).
# The recipe, shared with every other language and with the projects `reconciler-host new
# --lang c` writes, is in ../lib.sh; so is what a build reads and when it is skipped.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib.sh
source "$here/../lib.sh"
build_language_guests c "$here"
