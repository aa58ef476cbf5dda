# shellcheck shell=bash
# Sourced by scripts that run cargo and may themselves be run from a test or bench (./dev,
# guests/build.sh). Such a process inherits what cargo sets for a running target
# (CARGO_MANIFEST_DIR...); some build scripts (ring's) rerun when those change, which rebuilt
# the TLS stack on every switch between `cargo test` and a plain build. Unset them.
for var in $(compgen -e | grep -E '^CARGO_(MANIFEST_|PKG_|BIN_EXE_|CRATE_NAME$|BIN_NAME$|PRIMARY_PACKAGE$|TARGET_TMPDIR$)' || true); do
    unset "$var"
done
