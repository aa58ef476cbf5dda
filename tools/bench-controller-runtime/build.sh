#!/usr/bin/env bash
# Builds the controller-runtime baseline of the controller benchmark (main.go) from the Go module
# proxy: controller-runtime v0.23 (go.mod; the release that made the priority queue its default)
# with the client-go it pins, and the control plane's Go settings. Prints the binary's path.
# Go's own caches make a second build instant.
#
#   tools/bench-controller-runtime/build.sh          # build, print the binary
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROG=bench-controller-runtime/build.sh
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
command -v go >/dev/null || die "go is not on PATH; install Go >= 1.26"
# As tools/control-plane/build.sh: go.sum pins every hash, the proxy serves no checksum database.
export GOSUMDB=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local
version=$(sed -n 's/^[[:space:]]*sigs.k8s.io\/controller-runtime \(v[^ ]*\)$/\1/p' "$HERE/go.mod")
[[ -n "$version" ]] || die "$HERE/go.mod names no controller-runtime version"
OUT=${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/bench-controller-runtime/$version
mkdir -p "$OUT"
cd "$HERE"
go build -trimpath -ldflags "-s -w" -o "$OUT/bench-controller-runtime" . >&2
echo "$OUT/bench-controller-runtime"
