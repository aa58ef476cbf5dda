#!/usr/bin/env bash
# Builds every Go guest (guests/go/<name>/, a Go module) into target/guests/<name>-go.wasm with
# stock Go (>= 1.25, GOOS=wasip1, -buildmode=c-shared) and `reconciler-host componentize`
# (tools/componentize); the Go SDK (../sdk-go: package reconciler) and gc.go go into each. The
# greeter is also built pre-initialised, into target/guests/greeter-go-preinit.wasm.
# The recipe, shared with every other language and with the projects `reconciler-host new
# --lang go` writes, is in ../lib.sh; so is what a build reads and when it is skipped.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib.sh
source "$here/../lib.sh"
build_language_guests go "$here"
# The greeter once more, pre-initialised (lib.sh: go_build), from the same source: the offline
# runner's fixtures and the languages bench run it beside the plain build.
go_preinit=1 build_guest go "$here/greeter" "$repo/target/guests/greeter-go-preinit.wasm"
