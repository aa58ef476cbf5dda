#!/usr/bin/env bash
# Builds the host's image from deploy/Containerfile with buildah (no daemon, no registry) and
# writes it as an OCI archive, target/image/reconciler-host.oci.tar; with --import, also loads it
# into the local cluster's containerd (tools/control-plane/cluster).
#
# The binary is the release build with glibc's static runtime (one file, FROM scratch, beside the
# CA bundle), stripped; it is built in its own target directory (target/x86_64-unknown-linux-gnu),
# so it never invalidates the dynamic builds the tests use. Needs buildah (Debian; cluster up installs it).
#
#   deploy/image.sh [--import]        IMAGE=localhost/reconciler-host:dev by default
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE=${IMAGE:-localhost/reconciler-host:dev}
OUT=$REPO/target/image
PROG=image.sh
# shellcheck source=../tools/lib.sh
source "$REPO/tools/lib.sh"
forget_cargo_run_env

command -v buildah >/dev/null || die "buildah is not installed (apt-get install buildah, or tools/control-plane/cluster up)"
say "building the static host binary (release)"
(cd "$REPO" && CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --release --quiet --target x86_64-unknown-linux-gnu -p reconciler-host --bin reconciler-host)
binary=$REPO/target/x86_64-unknown-linux-gnu/release/reconciler-host
if readelf -d "$binary" | grep -q '(NEEDED)'; then
  die "$binary is dynamically linked; the image has no libraries"
fi

mkdir -p "$OUT"
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
strip -o "$context/reconciler-host" "$binary"
# Debian's bundle (package ca-certificates), the roots the host trusts for registries over HTTPS.
cabundle=/etc/ssl/certs/ca-certificates.crt
[[ -s "$cabundle" ]] || die "$cabundle is missing (apt-get install ca-certificates)"
cp "$cabundle" "$context/ca-certificates.crt"
cp "$REPO/deploy/Containerfile" "$context/"
storage=(--storage-driver vfs --root "$OUT/storage" --runroot "$context/run")
buildah "${storage[@]}" build --quiet --layers=false -f "$context/Containerfile" -t "$IMAGE" "$context" >/dev/null
rm -f "$OUT/reconciler-host.oci.tar"
buildah "${storage[@]}" push --quiet "$IMAGE" "oci-archive:$OUT/reconciler-host.oci.tar:$IMAGE"
# The store is only a staging area: the archive is the artefact.
buildah "${storage[@]}" rmi --all >/dev/null 2>&1 || true
say "$IMAGE: binary $(du -h "$context/reconciler-host" | cut -f1), archive $(du -h "$OUT/reconciler-host.oci.tar" | cut -f1) ($OUT/reconciler-host.oci.tar)"
if [[ "${1:-}" == --import ]]; then
  "$REPO/tools/control-plane/cluster" import "$OUT/reconciler-host.oci.tar"
fi
