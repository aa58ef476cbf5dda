#!/usr/bin/env bash
# Builds every Go guest (guests/go/<name>/, a Go module) into target/guests/<name>-go.wasm with
# stock Go (>= 1.25, GOOS=wasip1, -buildmode=c-shared) and reconciler-componentize
# (tools/componentize); gc.go goes into each.
# The recipe, shared with every other language and with the projects `reconciler-host new
# --lang go` writes, is in ../lib.sh; so is what a build reads and when it is skipped.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib.sh
source "$here/../lib.sh"
build_language_guests go "$here"
