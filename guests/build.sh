#!/usr/bin/env bash
# Builds every guest as a release WebAssembly component and collects them in
# <repo>/target/guests/: network.wasm, widget.wasm, widget-v2.wasm, and the test guests
# wrong-world.wasm, old-contract.wasm and bench.wasm (Rust, guests/*), and greeter.wasm
# (Python, guests/python/build.sh).
#
# Idempotent: cargo rebuilds only what changed, and an artefact is replaced (atomically, by
# rename) only when its bytes differ, so a host watching the directory sees no spurious reloads.
set -euo pipefail

guests="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$guests")"
out="$repo/target/guests"
target=wasm32-wasip2
# cargo package name -> artefact name (cargo writes cdylibs with underscores)
artefacts=(network:network widget:widget widget_v2:widget-v2 wrong_world:wrong-world old_contract:old-contract bench:bench)

cd "$guests" # so rustup and cargo see rust-toolchain.toml and guests/.cargo/config.toml
source "$repo/tools/cargo-env.sh"

if ! rustup target list --installed | grep -qx "$target"; then
    echo "build.sh: adding the $target target to the toolchain" >&2
    rustup target add "$target"
fi

if ! cargo build --release --target "$target"; then
    echo "build.sh: error: cargo build of the guests (in $guests) failed; see the compiler output above" >&2
    exit 1
fi

built="${CARGO_TARGET_DIR:-$guests/target}/$target/release"
mkdir -p "$out"
for pair in "${artefacts[@]}"; do
    src="$built/${pair%%:*}.wasm"
    dst="$out/${pair#*:}.wasm"
    if [[ ! -f "$src" ]]; then
        echo "build.sh: error: cargo succeeded but $src is missing" >&2
        exit 1
    fi
    if ! cmp -s "$src" "$dst"; then
        cp "$src" "$dst.partial"
        mv -f "$dst.partial" "$dst"
    fi
done

# Guests in other languages, against the same WIT.
"$guests/python/build.sh"

echo "guests in $out:"
for dst in "$out"/*.wasm; do
    printf '  %-18s %9d bytes\n' "$(basename "$dst")" "$(stat -c %s "$dst")"
done

if [[ "${1:-}" == "--imports" ]]; then
    python3 "$guests/tools/component-imports.py" "$out"/*.wasm
fi
