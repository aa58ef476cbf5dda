#!/usr/bin/env bash
# Builds {{name}}.wasm: rustc links a wasm32-wasip2 cdylib straight into a component.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
cargo build --release --target wasm32-wasip2
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/{{crate}}.wasm" {{name}}.wasm.partial
mv -f {{name}}.wasm.partial {{name}}.wasm
echo "built $(pwd)/{{name}}.wasm"
