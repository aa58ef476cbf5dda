#!/usr/bin/env bash
# Builds the `cosign` CLI for one pinned release from the Go module proxy alone (no release
# downloads): the real client the signed-guest tests sign with. The binary lands in the user's
# cache directory ($XDG_CACHE_HOME or ~/.cache, /reconciler-host/cosign/<version>), keyed by the
# version, so fresh checkouts and CI runs on the same machine reuse it; a second call with it
# present returns at once. About 10 minutes on the 2-core dev machine, once.
#
#   tools/cosign/build.sh          # build (or reuse) the pinned version
#   tools/cosign/build.sh --print  # print the binary's path and exit
set -euo pipefail

COSIGN_VERSION=v2.6.5
OUT=${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/cosign/$COSIGN_VERSION
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [ "${1:-}" = "--print" ]; then
  echo "$OUT/cosign"
  exit 0
fi

# Several callers at once (parallel test binaries) wait for one build.
exec 8>"$OUT/.build.lock"
flock 8
if [ -x "$OUT/cosign" ] && [ "$(cat "$OUT/.built" 2>/dev/null)" = "$COSIGN_VERSION" ]; then
  echo "cosign $COSIGN_VERSION already built in $OUT"
  exit 0
fi

command -v go >/dev/null || { echo "error: go is not on PATH; install Go >= 1.26" >&2; exit 1; }
# The proxy serves modules but not sum.golang.org lookups here; `go install pkg@version` checks
# every module against cosign's own go.sum.
export GOSUMDB=off CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=
started=$(date +%s)
GOBIN="$OUT" go install "github.com/sigstore/cosign/v2/cmd/cosign@$COSIGN_VERSION"
echo "$COSIGN_VERSION" > "$OUT/.built"
echo "cosign $COSIGN_VERSION built in $OUT in $(( $(date +%s) - started )) s"
