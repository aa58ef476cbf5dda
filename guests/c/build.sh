#!/usr/bin/env bash
# Builds every C guest (guests/c/<name>/*.c) into <repo>/target/guests/<name>-c.wasm, against the
# same wit/ as every other guest:
#   1. bindings from wit/ (controller.h/.c and the component-type object) by
#      reconciler-componentize (tools/componentize, the generator crate of `wit-bindgen c`);
#   2. clang-19 for wasm32-wasi as a reactor (a library the host calls, no `_start`), against
#      Debian's wasi-libc (wasip1; Debian has no wasip2 sysroot);
#   3. reconciler-componentize wraps the core module into a component with the WASI preview1
#      reactor adapter of the host's wasmtime release (used only if the module calls WASI).
#
# The compiler comes from Debian (clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32), installed
# with apt-get when missing. A guest is rebuilt only when its sources, the WIT, the compiler or
# the tool changed (a stamp next to the artefact records what it was built from), and replaced
# by rename.
set -euo pipefail

c_guests="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$c_guests/../.." && pwd)"
out="$repo/target/guests"
work="$repo/target/guests-build/c"
packages=(clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32)
world=controller

missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
if ((${#missing[@]})); then
    if [[ "$(id -u)" != 0 ]]; then
        echo "c/build.sh: error: the C guests need ${missing[*]}; install them with: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
    echo "c/build.sh: installing ${missing[*]} (Debian)" >&2
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
        echo "c/build.sh: error: apt-get could not install ${missing[*]}" >&2
        exit 1
    fi
fi

source "$repo/tools/cargo-env.sh"
if ! (cd "$repo" && cargo build --release --quiet -p reconciler-componentize); then
    echo "c/build.sh: error: cargo build of tools/componentize failed; see the compiler output above" >&2
    exit 1
fi
tool="${CARGO_TARGET_DIR:-$repo/target}/release/reconciler-componentize"
# What a build depends on besides the guest's own files (this script holds the flags).
toolchain="$(clang-19 --version | head -1; cat "${BASH_SOURCE[0]}" "$repo/tools/componentize/Cargo.toml" "$repo/tools/componentize/src/"*.rs)"

mkdir -p "$out"
for dir in "$c_guests"/*/; do
    compgen -G "$dir*.c" >/dev/null || continue
    name="$(basename "$dir")"
    dst="$out/$name-c.wasm"
    stamp="$(cat "$dir"/*.[ch] "$repo"/wit/*.wit <(echo "$toolchain") | sha256sum | cut -d' ' -f1)"
    if [[ -f "$dst" && "$(cat "$dst.stamp" 2>/dev/null)" == "$stamp" ]]; then
        continue
    fi
    # One directory per build, so that concurrent builds do not meet; removed after a success.
    mkdir -p "$work"
    build="$(mktemp -d "$work/$name.XXXXXX")"
    mkdir "$build/bindings"
    if ! "$tool" bindings --lang c --wit "$repo/wit" --world "$world" --out "$build/bindings" ||
        ! clang-19 --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -Os -Wall -Werror \
            -Wl,--strip-all -I "$build/bindings" -o "$build/core.wasm" \
            "$dir"*.c "$build/bindings/$world.c" "$build/bindings/${world}_component_type.o" ||
        ! "$tool" component "$build/core.wasm" --out "$build/component.wasm"; then
        echo "c/build.sh: error: building $dir failed (the message is above; the build directory is $build)" >&2
        exit 1
    fi
    mv -f "$build/component.wasm" "$dst"
    echo "$stamp" >"$dst.stamp"
    rm -rf "$build"
done
