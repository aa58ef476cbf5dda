#!/usr/bin/env bash
# Builds the controller-runtime baseline of the controller benchmark (main.go) from the Go module
# proxy, against one of the controller-runtime releases the bench compares, with the client-go it
# pins and the control plane's Go settings: v0.25 (go.mod; the default) or v0.23 (go.v0.23.mod,
# the release that made the priority queue its default). Prints the binary's path, one per
# release; Go's own caches make a second build instant.
#
#   tools/bench-controller-runtime/build.sh          # v0.25: build, print the binary
#   tools/bench-controller-runtime/build.sh v0.23    # the same main.go against v0.23
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROG=bench-controller-runtime/build.sh
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
command -v go >/dev/null || die "go is not on PATH; install Go >= 1.26"
# As tools/control-plane/build.sh: go.sum pins every hash, the proxy serves no checksum database.
export GOSUMDB=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local
release=${1:-v0.25}
case $release in
  v0.25) modfile=go.mod tags= ;;
  # main.go's one v0.25-only call lives in a file this tag leaves out.
  v0.23) modfile=go.v0.23.mod tags=controller_runtime_v0_23 ;;
  *) die "unknown release $release: v0.25 (go.mod) or v0.23 (go.v0.23.mod)" ;;
esac
version=$(sed -n 's/^[[:space:]]*sigs.k8s.io\/controller-runtime \(v[^ ]*\)$/\1/p' "$HERE/$modfile")
[[ "$version" == "$release".* ]] || die "$HERE/$modfile pins controller-runtime '$version', not $release.x"
OUT=${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/bench-controller-runtime/$version
mkdir -p "$OUT"
cd "$HERE"
go build -modfile="$modfile" -tags="$tags" -trimpath -ldflags "-s -w" \
  -o "$OUT/bench-controller-runtime" . >&2
echo "$OUT/bench-controller-runtime"
