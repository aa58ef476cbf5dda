#!/usr/bin/env bash
# Builds the docs book (docs/, with docs/SUMMARY.md as its table of contents) into target/book
# with mdBook. mdBook comes pinned from crates.io alone, no release downloads, and is installed
# once into the user's cache directory ($XDG_CACHE_HOME or ~/.cache,
# /reconciler-host/tools/mdbook-<version>/), keyed by the version, so fresh checkouts and CI
# runs on the same machine reuse it; with it present only the book is built (under a second).
# Installing it took about 3 minutes on the 2-core dev machine. Without default features: no
# `serve`, `watch` or search index, which a build for reading and link checking does not need.
#
#   tools/docs/build.sh           # install mdBook (or reuse it), build the book into target/book
#   tools/docs/build.sh --print   # print mdbook's path and exit
set -euo pipefail

VERSION=0.5.4
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PROG=docs/build.sh
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
case "${1:-}" in
  --print | "") ;;
  *)
    echo "usage: $0 [--print]" >&2
    exit 2
    ;;
esac
OUT=${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/tools/mdbook-$VERSION
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
MDBOOK=$OUT/bin/mdbook

if [[ "${1:-}" == "--print" ]]; then
  echo "$MDBOOK"
  exit 0
fi

# Several callers at once (parallel test binaries) wait for one install.
exec 8>"$OUT/.build.lock"
flock 8
if [[ ! -x "$MDBOOK" ]] || [[ "$(cat "$OUT/.built" 2>/dev/null)" != "$VERSION" ]]; then
  command -v cargo >/dev/null || die "cargo is not on PATH; install Rust with rustup"
  started=$(date +%s)
  # Run from a test, this script inherits cargo's variables for a running target.
  forget_cargo_run_env
  # Its own lock file and target directory, not the workspace's: a test running this script
  # must not wait for the cargo that runs the test.
  # A debug build without debug info, as wkg's: the book is small, and the release profile's
  # optimisation is most of the install's time (131 s cold in release, 2026-12-06).
  CARGO_PROFILE_DEV_DEBUG=0 CARGO_TARGET_DIR="$OUT/target" cargo install --quiet --locked --debug \
    --no-default-features --root "$OUT" mdbook --version "$VERSION"
  rm -rf "$OUT/target"
  echo "$VERSION" >"$OUT/.built"
  echo "mdbook $VERSION installed in $OUT in $(($(date +%s) - started)) s"
fi
exec 8>&-

"$MDBOOK" build "$ROOT/docs" --dest-dir "$ROOT/target/book"
