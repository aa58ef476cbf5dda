#!/usr/bin/env bash
# Builds the client-go baseline of the controller benchmark (main.go) from the Go module proxy,
# with the client-go of the Kubernetes release the control plane runs by default
# (../control-plane/version.env; go.mod pins it) and the control plane's Go settings. Prints the
# binary's path, one per client-go version; Go's own caches make a second build instant.
#
#   tools/bench-client-go/build.sh          # build, print the binary
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROG=bench-client-go/build.sh
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
# shellcheck source-path=SCRIPTDIR source=../control-plane/version.env
source "$HERE/../control-plane/version.env"
# The default release, not K8S_VERSION: the baseline stays the client-go a team would pick today
# when K8S_VERSION selects the release before it for the control plane.
release=${K8S_DEFAULT_VERSION:-$K8S_VERSION}
want="k8s.io/client-go v0.${release#v1.}"
grep -q "^	$want$" "$HERE/go.mod" ||
  die "$HERE/go.mod does not pin $want (control plane $release); update its require block"
command -v go >/dev/null || die "go is not on PATH; install Go >= 1.26"
# As tools/control-plane/build.sh: go.sum pins every hash, the proxy serves no checksum database.
export GOSUMDB=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local
OUT=${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/bench-client-go/v0.${release#v1.}
mkdir -p "$OUT"
cd "$HERE"
go build -trimpath -ldflags "-s -w" -o "$OUT/bench-client-go" . >&2
echo "$OUT/bench-client-go"
