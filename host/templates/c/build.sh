#!/usr/bin/env bash
# Builds {{name}}.wasm: bindings from wit/, clang-19 for wasm32-wasi (a reactor), then a component.
# Needs Debian's clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32, and reconciler-componentize
# (tools/componentize in the reconciler-host repository: `cargo install --path tools/componentize`),
# on PATH or named by $RECONCILER_COMPONENTIZE.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
tool="${RECONCILER_COMPONENTIZE:-reconciler-componentize}"
rm -rf build && mkdir -p build/bindings
"$tool" bindings --lang c --wit wit --world controller --out build/bindings
clang-19 --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -Os -Wall -Werror -Wl,--strip-all \
    -I build/bindings -o build/core.wasm ./*.c build/bindings/controller.c build/bindings/controller_component_type.o
"$tool" component build/core.wasm --out {{name}}.wasm.partial
mv -f {{name}}.wasm.partial {{name}}.wasm
echo "built $(pwd)/{{name}}.wasm"
