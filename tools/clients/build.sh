#!/usr/bin/env bash
# Builds the field's own clients, pinned, from the Go module proxy (cosign, oras, helm) or
# crates.io (wkg) alone, no release downloads: the real tools the signed-guest,
# interoperability and chart tests run against the host.
# Each binary lands in the user's cache directory ($XDG_CACHE_HOME or ~/.cache,
# /reconciler-host/clients/<name>-<version>/), keyed by the version, so fresh checkouts and CI
# runs on the same machine reuse it; a second call with it present returns at once.
# cosign3 is cosign 3.x (a binary named `cosign`, in its own directory): it writes Sigstore
# bundles where 2.x writes `.sig` tags, and the host reads both. cosign 3 can still write a
# `.sig` tag (`--new-bundle-format=false --use-signing-config=false`, deprecated), of the same
# shape for a key's signature; cosign 2 stays all the same, as what its users push.
#
# Two Go module graphs, so each dependency is downloaded and compiled once per graph:
# - cosign (2.x) alone, `go install pkg@version`: its own go.mod, exactly as released. Sharing a
#   graph with the others would lift most of its dependencies by MVS (Kubernetes 0.34 to 0.37,
#   go-containerregistry 0.20 to 0.21, sigstore-go 1.1 to 1.2, open-policy-agent 1.8 to 1.17,
#   gitlab's client-go 0.143 to 1.46): no longer the cosign 2 its users run.
# - cosign3, oras and helm: the module in this directory (go.mod names them as tools; its
#   go.sum pins every hash), built in one `go build`. MVS lifts little there: Kubernetes
#   0.36.2 to 0.37.0 for cosign 3 (helm's own), oras-go 2.6.2 to 2.7.0 for helm (oras's own),
#   golang.org/x patch levels. Their versions are the ones go.mod requires; to move one,
#   `go get -tool PKG@VERSION` here.
# A module build has no module version of its own to report, so the versions are set at link
# time as the projects' Makefiles set them: cosign's (sigs.k8s.io/release-utils), and helm's
# with the Kubernetes version its `template` and `lint` assume (from the client-go it links).
# wkg is a debug build (`cargo install --debug`, no debug info): the tests push and pull a
# component of some 40 kB with it, 0.2 s either way; the release profile's optimisation
# doubled its build.
#
# Cold, on the 2-core dev machine (empty Go module and build caches, empty cargo registry;
# 2026-12-06, `nice -n 10` on the machine shared with other builds): cosign 2 244 s; cosign3,
# oras and helm in one build 285 s (203 + 12 + 168 s built apart the same day); wkg 150 s
# (294 s in release the same day). In all 11 minutes, where the old way took 15 the same day
# (25 on an earlier, busier run: cosign 2 314 s, cosign 3 247, oras 32, wkg 718, helm 187).
#
#   tools/clients/build.sh cosign|cosign3|oras|wkg|helm          # build (or reuse) the pinned version
#   tools/clients/build.sh cosign|cosign3|oras|wkg|helm --print  # print the binary's path and exit
#   tools/clients/build.sh shared                       # cosign3, oras and helm (one go build)
#   tools/clients/build.sh all                          # every client
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROG=clients/build.sh
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"

CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/clients
# The clients built from this directory's module, in the order their locks are taken.
SHARED=(cosign3 oras helm)

# The version go.mod here requires of MODULE.
required() {
  awk -v m="$1" '$1 == m { print $2; exit }' "$HERE/go.mod"
}

# Sets VERSION, PACKAGE, BIN (relative to OUT) and OUT (created) for client $1.
client() {
  case "$1" in
    cosign) VERSION=v2.6.5 PACKAGE=github.com/sigstore/cosign/v2/cmd/cosign BIN=cosign ;;
    cosign3) PACKAGE=github.com/sigstore/cosign/v3/cmd/cosign BIN=cosign ;;
    oras) PACKAGE=oras.land/oras/cmd/oras BIN=oras ;;
    wkg) VERSION=0.16.1 PACKAGE=wkg BIN=bin/wkg ;;
    helm) PACKAGE=helm.sh/helm/v3/cmd/helm BIN=helm ;;
    *)
      echo "usage: $0 cosign|cosign3|oras|wkg|helm|all [--print]" >&2
      exit 2
      ;;
  esac
  if [[ " ${SHARED[*]} " == *" $1 "* ]]; then
    VERSION=$(required "${PACKAGE%/cmd/*}")
    [[ -n "$VERSION" ]] || die "$HERE/go.mod does not require ${PACKAGE%/cmd/*}"
  fi
  OUT=$CACHE/$1-$VERSION
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
}

# Takes client $1's lock (held until the script exits: several callers at once, such as parallel
# test binaries, wait for one build); true when its binary is already built.
lock_and_check() {
  local fd
  exec {fd}>"$OUT/.build.lock"
  flock "$fd"
  [[ -x "$OUT/$BIN" ]] && [[ "$(cat "$OUT/.built" 2>/dev/null)" == "$VERSION" ]]
}

go_env() {
  command -v go >/dev/null || die "go is not on PATH; install Go >= 1.26"
  # The proxy serves modules but not sum.golang.org lookups here; go.sum (committed, or the
  # tool's own for `go install pkg@version`) pins every hash.
  export GOSUMDB=off CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off
}

# Builds the clients named (a subset of SHARED) not yet built, in one `go build`.
build_shared() {
  local name stale=() packages=() outs=() bins=() versions=()
  for name; do
    client "$name"
    if lock_and_check; then
      echo "$name $VERSION already built in $OUT"
    else
      stale+=("$name") packages+=("$PACKAGE") outs+=("$OUT") bins+=("$BIN") versions+=("$VERSION")
    fi
  done
  ((${#stale[@]})) || return 0
  go_env
  export GOFLAGS=-mod=mod
  cd "$HERE"
  local started helm cosign client_go ldflags i
  started=$(date +%s)
  helm=helm.sh/helm/v3 cosign=sigs.k8s.io/release-utils/version
  # What helm's Makefile sets: its version, and Kubernetes 1.N for client-go 0.N; and cosign's
  # (its gitVersion); each binary takes the variables it has.
  client_go=$(go list -m -f '{{.Version}}' k8s.io/client-go | sed -n 's/^v0\.\([0-9]*\)\..*/\1/p')
  [[ "$client_go" =~ ^[0-9]+$ ]] || die "cannot read the client-go version helm links"
  ldflags="-s -w -X $helm/internal/version.version=$(required $helm) -X $helm/internal/version.gitTreeState=clean
-X $helm/pkg/lint/rules.k8sVersionMajor=1 -X $helm/pkg/lint/rules.k8sVersionMinor=$client_go
-X $helm/pkg/chartutil.k8sVersionMajor=1 -X $helm/pkg/chartutil.k8sVersionMinor=$client_go
-X $cosign.gitVersion=$(required github.com/sigstore/cosign/v3) -X $cosign.gitTreeState=clean"
  # Global: the EXIT trap runs outside this function.
  BUILD_TMP=$(mktemp -d "$CACHE/.go-build.XXXXXX")
  trap 'rm -rf "$BUILD_TMP"' EXIT
  # `go build -o DIR/` names each binary by its package's last element: cosign, oras, helm.
  echo "building ${stale[*]} (one go build, one module graph)"
  go build -trimpath -ldflags "$ldflags" -o "$BUILD_TMP/" "${packages[@]}"
  for i in "${!stale[@]}"; do
    mv "$BUILD_TMP/$(basename "${packages[$i]}")" "${outs[$i]}/${bins[$i]}"
    echo "${versions[$i]}" >"${outs[$i]}/.built"
    echo "${stale[$i]} ${versions[$i]} built in ${outs[$i]}"
  done
  echo "${stale[*]} built in $(($(date +%s) - started)) s"
}

case "${1:-}" in
  shared)
    build_shared "${SHARED[@]}"
    exit 0
    ;;
  all)
    "$HERE/build.sh" cosign
    (build_shared "${SHARED[@]}") # a subshell: its locks go when it ends, before wkg's build
    "$HERE/build.sh" wkg
    exit 0
    ;;
esac
NAME=${1:-}
client "$NAME"

if [[ "${2:-}" == "--print" ]]; then
  echo "$OUT/$BIN"
  exit 0
fi

if [[ " ${SHARED[*]} " == *" $NAME "* ]]; then
  build_shared "$NAME"
  exit 0
fi

if lock_and_check; then
  echo "$NAME $VERSION already built in $OUT"
  exit 0
fi
started=$(date +%s)
if [[ "$NAME" == wkg ]]; then
  # A Rust tool: crates.io, its own lock file, its own target directory (not the workspace's).
  CARGO_PROFILE_DEV_DEBUG=0 CARGO_TARGET_DIR="$OUT/target" \
    cargo install --quiet --locked --debug --root "$OUT" "$PACKAGE" --version "$VERSION"
  rm -rf "$OUT/target"
else
  go_env
  export GOFLAGS=
  # Without the symbol table and DWARF, as the shared build links: less for the linker to write.
  GOBIN="$OUT" go install -trimpath -ldflags "-s -w" "$PACKAGE@$VERSION"
fi
echo "$VERSION" >"$OUT/.built"
echo "$NAME $VERSION built in $OUT in $(($(date +%s) - started)) s"
