#!/usr/bin/env bash
# Builds the field's own clients, pinned, from the Go module proxy (cosign, oras, helm) or
# crates.io (wkg) alone, no release downloads: the real tools the signed-guest,
# interoperability and chart tests run against the host.
# Each binary lands in the user's cache directory ($XDG_CACHE_HOME or ~/.cache,
# /reconciler-host/clients/<name>-<version>/), keyed by the version, so fresh checkouts and CI
# runs on the same machine reuse it; a second call with it present returns at once. On the
# 2-core dev machine, once: cosign 6-10 minutes, cosign3 4 more (sharing its modules), oras
# under 1, wkg about 5, helm about 3 (162 s with an empty Go build cache). cosign3 is cosign
# 3.x (a binary named `cosign`, in its own directory): it writes Sigstore bundles where 2.x
# writes `.sig` tags, and the host reads both.
#
# helm is built as its Makefile builds it: the version, and the Kubernetes version its
# `template` and `lint` assume (from the client-go it links), set at link time.
#
#   tools/clients/build.sh cosign|cosign3|oras|wkg|helm          # build (or reuse) the pinned version
#   tools/clients/build.sh cosign|cosign3|oras|wkg|helm --print  # print the binary's path and exit
#   tools/clients/build.sh all                          # every client
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROG=clients/build.sh
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
case "${1:-}" in
  cosign) VERSION=v2.6.5 PACKAGE=github.com/sigstore/cosign/v2/cmd/cosign BIN=cosign ;;
  cosign3) VERSION=v3.1.3 PACKAGE=github.com/sigstore/cosign/v3/cmd/cosign BIN=cosign ;;
  oras) VERSION=v1.3.6 PACKAGE=oras.land/oras/cmd/oras BIN=oras ;;
  wkg) VERSION=0.16.1 PACKAGE=wkg BIN=bin/wkg ;;
  helm) VERSION=v3.22.0 PACKAGE=helm.sh/helm/v3/cmd/helm BIN=helm ;;
  all)
    for client in cosign cosign3 oras wkg helm; do "$HERE/build.sh" "$client"; done
    exit 0
    ;;
  *)
    echo "usage: $0 cosign|cosign3|oras|wkg|helm|all [--print]" >&2
    exit 2
    ;;
esac
NAME=$1
OUT=${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/clients/$NAME-$VERSION
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [[ "${2:-}" == "--print" ]]; then
  echo "$OUT/$BIN"
  exit 0
fi

# Several callers at once (parallel test binaries) wait for one build.
exec 8>"$OUT/.build.lock"
flock 8
if [[ -x "$OUT/$BIN" ]] && [[ "$(cat "$OUT/.built" 2>/dev/null)" == "$VERSION" ]]; then
  echo "$NAME $VERSION already built in $OUT"
  exit 0
fi

started=$(date +%s)
if [[ "$NAME" == wkg ]]; then
  # A Rust tool: crates.io, its own lock file, its own target directory (not the workspace's).
  CARGO_TARGET_DIR="$OUT/target" cargo install --quiet --locked --root "$OUT" "$PACKAGE" --version "$VERSION"
  rm -rf "$OUT/target"
  echo "$VERSION" >"$OUT/.built"
  echo "$NAME $VERSION built in $OUT in $(($(date +%s) - started)) s"
  exit 0
fi
command -v go >/dev/null || die "go is not on PATH; install Go >= 1.26"
# The proxy serves modules but not sum.golang.org lookups here; `go install pkg@version` checks
# every module against the tool's own go.sum.
export GOSUMDB=off CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=
flags=()
if [[ "$NAME" == helm ]]; then
  # What helm's Makefile sets: its version, and Kubernetes 1.N for client-go 0.N.
  module=${PACKAGE%/cmd/helm}
  client_go=$(go mod download -json "$module@$VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' |
    xargs sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p')
  [[ "$client_go" =~ ^[0-9]+$ ]] || die "cannot read the client-go version helm $VERSION links"
  flags=(-trimpath -ldflags "-s -w -X $module/internal/version.version=$VERSION -X $module/internal/version.gitTreeState=clean
-X $module/pkg/lint/rules.k8sVersionMajor=1 -X $module/pkg/lint/rules.k8sVersionMinor=$client_go
-X $module/pkg/chartutil.k8sVersionMajor=1 -X $module/pkg/chartutil.k8sVersionMinor=$client_go")
fi
GOBIN="$OUT" go install "${flags[@]}" "$PACKAGE@$VERSION"
echo "$VERSION" >"$OUT/.built"
echo "$NAME $VERSION built in $OUT in $(($(date +%s) - started)) s"
