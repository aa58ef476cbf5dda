#!/usr/bin/env bash
# Builds {{name}}.wasm with jco's QuickJS backend (pinned by package.json and package-lock.json;
# installed into the user's cache once per lockfile). --backend-qjs-disable-async: the host does
# not enable the component model's async intrinsics.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
toolchain="${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/jco-$(cat package.json package-lock.json | sha256sum | cut -c1-16)"
if [[ ! -x "$toolchain/node_modules/.bin/jco" ]]; then
    rm -rf "$toolchain" "$toolchain.partial" && mkdir -p "$toolchain.partial"
    cp package.json package-lock.json "$toolchain.partial/"
    (cd "$toolchain.partial" && npm install --no-audit --no-fund --no-save --loglevel=error >/dev/null)
    mv "$toolchain.partial" "$toolchain"
fi
"$toolchain/node_modules/.bin/jco" componentize app.js --wit wit --world-name controller \
    --backend qjs --backend-qjs-disable-async -o {{name}}.wasm.partial >/dev/null
mv -f {{name}}.wasm.partial {{name}}.wasm
echo "built $(pwd)/{{name}}.wasm"
