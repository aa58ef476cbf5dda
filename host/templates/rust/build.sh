#!/usr/bin/env bash
# Builds {{name}}.wasm: rustc links a wasm32-wasip2 cdylib straight into a component.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
cargo build --release --target wasm32-wasip2
# Copied to a name of its own and renamed over the artefact: concurrent builds never meet, and
# a host watching the file never loads half of it.
partial="$(mktemp ".{{name}}.wasm.XXXXXX")"
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/{{crate}}.wasm" "$partial"
chmod 644 "$partial"
mv -f "$partial" "{{name}}.wasm"
echo "built $(pwd)/{{name}}.wasm"
