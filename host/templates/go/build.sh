#!/usr/bin/env bash
# Builds {{name}}.wasm with stock Go (>= 1.25): bindings from wit/ into a copy of the module,
# GOOS=wasip1 -buildmode=c-shared, then a component with the WASI reactor adapter. Needs
# reconciler-componentize (tools/componentize in the reconciler-host repository: `cargo install
# --path tools/componentize`), on PATH or named by $RECONCILER_COMPONENTIZE.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
tool="${RECONCILER_COMPONENTIZE:-reconciler-componentize}"
rm -rf build && mkdir -p build/module
cp -r go.mod go.sum gc.go export_reconciler_api_reconciler build/module/
"$tool" bindings --lang go --wit wit --world controller --out build/bindings
rm build/bindings/go.mod && cp -r build/bindings/. build/module/
(cd build/module && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared \
    -ldflags='-checklinkname=0 -s -w' -o ../core.wasm .)
"$tool" component build/core.wasm --wit wit --world controller --out {{name}}.wasm.partial
mv -f {{name}}.wasm.partial {{name}}.wasm
echo "built $(pwd)/{{name}}.wasm"
