#!/usr/bin/env bash
# Builds every Go guest (guests/go/<name>/, a Go module) into <repo>/target/guests/<name>-go.wasm
# with stock Go, against the same wit/ as every other guest:
#   1. a copy of the module in <repo>/target/guests-build/go/<name>.XXXXXX/ (one per build, so
#      that concurrent builds do not meet; removed after a success) gets the bindings of its
#      world from reconciler-componentize (tools/componentize, the generator crate of
#      `wit-bindgen go`; the generated go.mod is dropped, the guest's own pins
#      go.bytecodealliance.org/pkg v0.2.3, the newest the module proxy here serves) and
#      guests/go/gc.go (why: see that file);
#   2. `GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared` makes a core module (the exports
#      are `//go:wasmexport` functions; -checklinkname=0 lets the bindings reach the runtime);
#   3. reconciler-componentize embeds the world and wraps the module into a component with the
#      WASI preview1 reactor adapter of the host's wasmtime release.
#
# The world is `controller`, or the one named in the guest's `wit-world` file (e.g.
# `network-controller`). Go (>= 1.25, for `//go:wasmexport` and the bindings) is the machine's;
# modules come through the Go module proxy into Go's own cache, checked against the guest's
# go.sum. A guest is rebuilt only when its sources, the WIT, Go or the tool changed (a stamp next
# to the artefact records what it was built from), and replaced by rename.
set -euo pipefail

go_guests="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$go_guests/../.." && pwd)"
out="$repo/target/guests"
work="$repo/target/guests-build/go"

if ! command -v go >/dev/null; then
    echo "go/build.sh: error: go is not installed (Go 1.25 or newer is needed for the Go guests)" >&2
    exit 1
fi
go_version="$(go env GOVERSION)"
minor="${go_version#go1.}"
if [[ "$go_version" != go1.* || "${minor%%.*}" -lt 25 ]]; then
    echo "go/build.sh: error: $go_version is too old: the Go guests need Go 1.25 or newer (//go:wasmexport with -buildmode=c-shared)" >&2
    exit 1
fi

source "$repo/tools/cargo-env.sh"
if ! (cd "$repo" && cargo build --release --quiet -p reconciler-componentize); then
    echo "go/build.sh: error: cargo build of tools/componentize failed; see the compiler output above" >&2
    exit 1
fi
tool="${CARGO_TARGET_DIR:-$repo/target}/release/reconciler-componentize"
# What a build depends on besides the guest's own files (this script holds the flags).
toolchain="$(echo "$go_version"; cat "${BASH_SOURCE[0]}" "$go_guests/gc.go" "$repo/tools/componentize/Cargo.toml" "$repo/tools/componentize/src/"*.rs)"

mkdir -p "$out"
for dir in "$go_guests"/*/; do
    [[ -f "$dir/go.mod" ]] || continue
    name="$(basename "$dir")"
    dst="$out/$name-go.wasm"
    world=controller
    [[ -f "$dir/wit-world" ]] && world="$(tr -d '[:space:]' <"$dir/wit-world")"
    stamp="$( (cd "$dir" && find . -type f -print0 | sort -z | xargs -0 cat; cat "$repo"/wit/*.wit; echo "$toolchain") | sha256sum | cut -d' ' -f1)"
    if [[ -f "$dst" && "$(cat "$dst.stamp" 2>/dev/null)" == "$stamp" ]]; then
        continue
    fi
    mkdir -p "$work"
    build="$(mktemp -d "$work/$name.XXXXXX")"
    cp -r "$dir". "$build/"
    if ! "$tool" bindings --lang go --wit "$repo/wit" --world "$world" --out "$build/bindings"; then
        echo "go/build.sh: error: generating the bindings of $dir failed (the message is above)" >&2
        exit 1
    fi
    rm "$build/bindings/go.mod"
    cp -r "$build/bindings/." "$build/" && rm -rf "$build/bindings"
    cp "$go_guests/gc.go" "$build/reconciler_gc.go"
    if ! (cd "$build" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath \
            -ldflags='-checklinkname=0 -s -w' -o core.wasm .) ||
        ! "$tool" component "$build/core.wasm" --wit "$repo/wit" --world "$world" --out "$build/component.wasm"; then
        echo "go/build.sh: error: building $dir failed (the message is above; a missing go.sum entry: run \`GONOSUMDB=go.bytecodealliance.org go mod tidy\` in $build and copy its go.sum to $dir)" >&2
        exit 1
    fi
    mv -f "$build/component.wasm" "$dst"
    echo "$stamp" >"$dst.stamp"
    rm -rf "$build"
done
