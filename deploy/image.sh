#!/usr/bin/env bash
# Builds the host's image from deploy/Containerfile with buildah (no daemon, no registry) and
# writes it as an OCI archive, target/image/reconciler-host.oci.tar; with --import, also loads it
# into the local cluster's containerd (tools/control-plane/cluster).
#
# The binary is the release build with glibc's static runtime (one file, FROM scratch, beside the
# CA bundle), stripped; it is built in its own target directory (target/x86_64-unknown-linux-gnu),
# so it never invalidates the dynamic builds the tests use. Needs buildah (Debian; cluster up installs it).
#
# --debug puts the workspace's debug build (target/debug/reconciler-host, dynamically linked)
# in the image instead, with the four libraries it loads (libc, libm, libgcc_s, the loader)
# copied from this machine: what the deploy test runs, so a cold `./dev test` does not compile
# wasmtime and kube a second time in release for it. Releases and `./dev deploy` use the default.
#
#   deploy/image.sh [--debug] [--import]        IMAGE=localhost/reconciler-host:dev by default
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE=${IMAGE:-localhost/reconciler-host:dev}
OUT=$REPO/target/image
PROG=image.sh
# shellcheck source=../tools/lib.sh
source "$REPO/tools/lib.sh"
forget_cargo_run_env

command -v buildah >/dev/null || die "buildah is not installed (apt-get install buildah, or tools/control-plane/cluster up)"
debug=0 import=0
for arg in "$@"; do
  case "$arg" in
    --debug) debug=1 ;;
    --import) import=1 ;;
    *) die "unknown argument $arg (usage: deploy/image.sh [--debug] [--import])" ;;
  esac
done
mkdir -p "$OUT"
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/root"
if [[ "$debug" == 1 ]]; then
  say "taking the debug host binary and the libraries it loads"
  (cd "$REPO" && cargo build --quiet -p reconciler-host --bin reconciler-host)
  binary=$REPO/target/debug/reconciler-host
  # Every library the binary loads, at the path the loader looks for it.
  while read -r library; do
    mkdir -p "$context/root$(dirname "$library")"
    cp -L "$library" "$context/root$library"
  done < <(ldd "$binary" | grep -oE '/[^ ]+[.]so[^ ]*')
else
  say "building the static host binary (release)"
  (cd "$REPO" && CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --quiet --target x86_64-unknown-linux-gnu -p reconciler-host --bin reconciler-host)
  binary=$REPO/target/x86_64-unknown-linux-gnu/release/reconciler-host
  if readelf -d "$binary" | grep -q '(NEEDED)'; then
    die "$binary is dynamically linked; the image has no libraries"
  fi
fi
strip -o "$context/root/reconciler-host" "$binary"
# Debian's bundle (package ca-certificates), the roots the host trusts for registries over HTTPS.
cabundle=/etc/ssl/certs/ca-certificates.crt
[[ -s "$cabundle" ]] || die "$cabundle is missing (apt-get install ca-certificates)"
mkdir -p "$context/root/etc/ssl/certs"
cp "$cabundle" "$context/root/etc/ssl/certs/ca-certificates.crt"
cp "$REPO/deploy/Containerfile" "$context/"
storage=(--storage-driver vfs --root "$OUT/storage" --runroot "$context/run")
buildah "${storage[@]}" build --quiet --layers=false -f "$context/Containerfile" -t "$IMAGE" "$context" >/dev/null
rm -f "$OUT/reconciler-host.oci.tar"
buildah "${storage[@]}" push --quiet "$IMAGE" "oci-archive:$OUT/reconciler-host.oci.tar:$IMAGE"
# The store is only a staging area: the archive is the artefact.
buildah "${storage[@]}" rmi --all >/dev/null 2>&1 || true
say "$IMAGE: binary $(du -h "$context/root/reconciler-host" | cut -f1), archive $(du -h "$OUT/reconciler-host.oci.tar" | cut -f1) ($OUT/reconciler-host.oci.tar)"
if [[ "$import" == 1 ]]; then
  "$REPO/tools/control-plane/cluster" import "$OUT/reconciler-host.oci.tar"
fi
