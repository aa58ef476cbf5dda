#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd for one Kubernetes release from the Go module proxy
# alone (no release downloads): the default in version.env, or K8S_VERSION from the environment
# (one of version.env's K8S_SUPPORTED_VERSIONS; each has its go.mod under versions/<v1.MINOR>/).
# The release before the default builds its kube-apiserver alone and runs with the default's
# etcd and kubectl (built first if need be), linked beside it: kubectl is supported one minor
# either side of its server, and kube-apiserver talks to etcd through the v3 API both etcds
# serve. The n-1 build took 296 s in a cold `./dev test` (2026-12-06) against 330 s with them.
# The binaries land in the user's cache directory ($XDG_CACHE_HOME or ~/.cache,
# /reconciler-host/control-plane/<version>), keyed by the version, so fresh checkouts and CI runs
# on the same machine reuse them; a second call with them present returns at once.
# CONTROL_PLANE_BIN overrides the directory.
#
#   tools/control-plane/build.sh            # build (or reuse) the default version
#   K8S_VERSION=v1.36.3 tools/control-plane/build.sh   # ... or the one before it
#   tools/control-plane/build.sh --cluster  # ... plus kubelet, kube-scheduler, kube-controller-manager
#                                           # (the local cluster of tools/control-plane/cluster)
#   tools/control-plane/build.sh --print    # print the binary directory and exit
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROG=control-plane/build.sh
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
# shellcheck source-path=SCRIPTDIR source=version.env
source "$HERE/version.env"
MOD_DIR="$HERE/versions/${K8S_VERSION%.*}"
# A version not in the list would build the binaries its minor's go.mod pins under another name.
if [[ " $K8S_SUPPORTED_VERSIONS " != *" $K8S_VERSION "* ]] ||
  ! grep -q "k8s.io/kubernetes $K8S_VERSION " "$MOD_DIR/go.mod" 2>/dev/null; then
  die "K8S_VERSION=$K8S_VERSION is not supported: pick one of $K8S_SUPPORTED_VERSIONS (version.env; a new one needs regenerate-go-mod.sh $K8S_VERSION first)"
fi
OUT=${CONTROL_PLANE_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/control-plane/$K8S_VERSION}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [[ "${1:-}" == "--print" ]]; then
  echo "$OUT"
  exit 0
fi
CLUSTER=0
[[ "${1:-}" == "--cluster" ]] && CLUSTER=1

# Several callers at once (test binaries, parallel `cp up`s) wait for one build instead of
# racing to write the same binaries.
exec 8>"$OUT/.build.lock"
flock 8

stamp="$OUT/.built"
cluster_stamp="$OUT/.built-cluster"
have_control_plane() {
  [[ -x "$OUT/kube-apiserver" ]] && [[ -x "$OUT/etcd" ]] && [[ -x "$OUT/kubectl" ]] &&
    [[ "$(cat "$stamp" 2>/dev/null)" == "$K8S_VERSION" ]]
}
have_cluster() {
  [[ -x "$OUT/kubelet" ]] && [[ -x "$OUT/kube-scheduler" ]] && [[ -x "$OUT/kube-controller-manager" ]] &&
    [[ "$(cat "$cluster_stamp" 2>/dev/null)" == "$K8S_VERSION" ]]
}
if have_control_plane && { [[ "$CLUSTER" == 0 ]] || have_cluster; }; then
  echo "control plane $K8S_VERSION already built in $OUT"
  exit 0
fi

command -v go >/dev/null || die "go is not on PATH; install Go >= 1.26"

# The proxy serves modules but not sum.golang.org lookups here; go.sum (committed) pins every hash,
# so the checksum database adds nothing for a build that only reads go.sum.
export GOSUMDB=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
cd "$MOD_DIR"

started=$(date +%s)
VER="-X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 \
-X k8s.io/component-base/version.gitMinor=${MINOR} -X k8s.io/component-base/version.gitTreeState=clean \
-X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION} -X k8s.io/client-go/pkg/version.gitMajor=1 \
-X k8s.io/client-go/pkg/version.gitMinor=${MINOR}"
if ! have_control_plane; then
  echo "building control plane $K8S_VERSION into $OUT (cold: about 10 minutes on 2 cores)"
  go build -trimpath -ldflags "-s -w ${VER}" -o "$OUT/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  if [[ "$K8S_VERSION" == "$K8S_DEFAULT_VERSION" ]]; then
    go build -trimpath -ldflags "-s -w ${VER}" -o "$OUT/kubectl" k8s.io/kubernetes/cmd/kubectl
    go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3
  else
    # The default's own lock and cache directory: no wait on this one's lock.
    default_out=$(K8S_VERSION=$K8S_DEFAULT_VERSION CONTROL_PLANE_BIN='' "$HERE/build.sh" --print)
    K8S_VERSION=$K8S_DEFAULT_VERSION CONTROL_PLANE_BIN='' "$HERE/build.sh"
    ln -sfn "$default_out/kubectl" "$OUT/kubectl"
    ln -sfn "$default_out/etcd" "$OUT/etcd"
  fi
  echo "$K8S_VERSION" >"$stamp"
  "$OUT/kube-apiserver" --version
  # sed, not head: head leaves after one line and etcd, still writing, dies of SIGPIPE (pipefail).
  "$OUT/etcd" --version | sed -n 1p
fi
if [[ "$CLUSTER" == 1 ]] && ! have_cluster; then
  echo "building kubelet, kube-scheduler, kube-controller-manager $K8S_VERSION into $OUT (cold: about 5 minutes on 2 cores)"
  for cmd in kubelet kube-scheduler kube-controller-manager; do
    go build -trimpath -ldflags "-s -w ${VER}" -o "$OUT/$cmd" "k8s.io/kubernetes/cmd/$cmd"
  done
  echo "$K8S_VERSION" >"$cluster_stamp"
  "$OUT/kubelet" --version
fi
echo "built in $(($(date +%s) - started))s"
