#!/usr/bin/env bash
# Writes versions/<v1.MINOR>/go.mod and go.sum for one Kubernetes release (default: K8S_VERSION,
# else the default in version.env): one `replace` per staging module (read from the
# k8s.io/kubernetes go.mod the proxy serves) and etcd at the version kube-apiserver links.
# Run only when adding or bumping a release; commit the result and name it in version.env.
#
#   tools/control-plane/regenerate-go-mod.sh [v1.MINOR.PATCH]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROG=control-plane/regenerate-go-mod.sh
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
# shellcheck source-path=SCRIPTDIR source=version.env
source "$HERE/version.env"
K8S_VERSION=${1:-$K8S_VERSION}
[[ "$K8S_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "want a release like v1.37.2, not '$K8S_VERSION'"
MOD_DIR="$HERE/versions/${K8S_VERSION%.*}"
mkdir -p "$MOD_DIR"
cd "$MOD_DIR"
export GOSUMDB=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local
STAGING=v0.${K8S_VERSION#v1.}
rm -f go.mod go.sum
go mod init reconciler-host.invalid/control-plane
go mod edit -go=1.26
GOMOD=$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' "$GOMOD" | while read -r m; do
  go mod edit -replace="${m}=${m}@${STAGING}"
done
godebug=$(sed -n 's/^godebug[[:space:]]\+\(default=go[0-9.]*\).*/\1/p' "$GOMOD" | head -1)
[[ -z "$godebug" ]] || go mod edit -godebug="$godebug"
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@${K8S_VERSION}"
go get -tool "k8s.io/kubernetes/cmd/kubectl@${K8S_VERSION}"
# The local cluster's node and controllers (build.sh --cluster).
for cmd in kubelet kube-scheduler kube-controller-manager; do
  go get -tool "k8s.io/kubernetes/cmd/${cmd}@${K8S_VERSION}"
done
etcd=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/client/v3)
go get -tool "go.etcd.io/etcd/server/v3@${etcd}"
go mod tidy
echo "versions/${K8S_VERSION%.*}/go.mod regenerated for $K8S_VERSION (etcd $etcd)"
