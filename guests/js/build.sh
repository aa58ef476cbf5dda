#!/usr/bin/env bash
# Builds every JavaScript guest (guests/js/<name>/app.js) into <repo>/target/guests/<name>-js.wasm
# with jco's QuickJS backend, against the same wit/ as every other guest.
#
# The toolchain is the one package.json + package-lock.json pin (jco 1.35.0; preview2-shim held at
# 0.25.0, without which `jco componentize` fails with "failed to get path metadata"). It is
# installed from the lockfile into the user's cache, once per lockfile (`npm install`, not `npm
# ci`: npm 11's `ci` insists on lock entries for every other platform's optional binaries). A guest is rebuilt only when
# its sources, the WIT or the lockfile changed (a stamp next to the artefact records what it was
# built from), and replaced by rename.
#
# QuickJS, not StarlingMonkey: 1.6 MB and ~5 s to build instead of 12 MB and ~55 s, and a first
# compile in the host of ~3 s instead of ~17 s. `--backend-qjs-disable-async`: the default build
# uses the component model's async intrinsics (`task.cancel`), which the host does not enable.
set -euo pipefail

js_guests="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$js_guests/../.." && pwd)"
out="$repo/target/guests"

if ! command -v npm >/dev/null; then
    echo "js/build.sh: error: npm is not installed (node 20+ and npm are needed for the JavaScript guests)" >&2
    exit 1
fi

lock_hash="$(cat "$js_guests/package.json" "$js_guests/package-lock.json" | sha256sum | cut -c1-16)"
toolchain="${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/jco-$lock_hash"
jco="$toolchain/node_modules/.bin/jco"
if [[ ! -x "$jco" ]]; then
    echo "js/build.sh: installing jco (guests/js/package-lock.json) into $toolchain" >&2
    mkdir -p "$(dirname "$toolchain")"
    partial="$(mktemp -d "$toolchain.XXXXXX")" # its own, should two builds install at once
    cp "$js_guests/package.json" "$js_guests/package-lock.json" "$partial/"
    if ! (cd "$partial" && npm install --no-audit --no-fund --no-save --loglevel=error >/dev/null); then
        rm -rf "$partial"
        echo "js/build.sh: error: npm install could not install the toolchain of guests/js/package-lock.json" >&2
        exit 1
    fi
    rm -rf "$toolchain" # a broken one (no jco in it)
    mv -T "$partial" "$toolchain" 2>/dev/null || rm -rf "$partial" # or another build's won
fi

mkdir -p "$out"
for dir in "$js_guests"/*/; do
    [[ -f "$dir/app.js" ]] || continue
    name="$(basename "$dir")-js"
    dst="$out/$name.wasm"
    stamp="$(cat "$dir"/*.js "$repo"/wit/*.wit "${BASH_SOURCE[0]}" <(echo "$lock_hash") | sha256sum | cut -d' ' -f1)"
    if [[ -f "$dst" && "$(cat "$dst.stamp" 2>/dev/null)" == "$stamp" ]]; then
        continue
    fi
    # A partial file of its own, so that concurrent builds do not meet. The world is
    # `controller`; a guest that needs the network backend would say so here.
    partial="$(mktemp "$out/.$name.XXXXXX")"
    if ! (cd "$dir" && "$jco" componentize app.js --wit "$repo/wit" --world-name controller \
        --backend qjs --backend-qjs-disable-async -o "$partial" >/dev/null); then
        rm -f "$partial"
        echo "js/build.sh: error: jco componentize failed for $dir (its message is above)" >&2
        exit 1
    fi
    chmod 644 "$partial"
    mv -f "$partial" "$dst"
    echo "$stamp" >"$dst.stamp"
done
