#!/usr/bin/env bash
# Builds every guest as a release WebAssembly component and collects them in
# <repo>/target/guests/: each Rust guest as <its directory's name>.wasm (network.wasm,
# widget.wasm, widget-v2.wasm, hostile.wasm, ...), and each guest under guests/<lang>/ (python,
# js, c, go) as <name>-<lang>.wasm (greeter-python.wasm, greeter-js.wasm, network-go.wasm, ...),
# by that language's build.sh with the recipe in lib.sh.
#
# Rust guests are discovered, not listed: every member of the guests workspace with a `cdylib`
# target is one (the SDK is a plain library). `cargo metadata` names them; adding a guest is
# adding a crate (see guests/README.md).
#
# Each Rust guest is then slimmed by tools/slim (reconciler-slim: the WASI stdio functions std
# imports are answered inside the component, which makes every instantiation cheaper); the
# linker's original stays in <repo>/target/guests/unslimmed/ for comparison and tests.
#
# `--only rust` builds the Rust guests alone (what `./dev demo` runs: no Python, JS, C or Go
# toolchain is installed for it); `--imports` prints every artefact's imports at the end.
#
# Idempotent: cargo rebuilds only what changed, and an artefact is replaced (atomically, by
# rename) only when its bytes differ, so a host watching the directory sees no spurious reloads.
set -euo pipefail

guests="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$guests")"
out="$repo/target/guests"
target=wasm32-wasip2

PROG=build.sh

cd "$guests" # so rustup and cargo see rust-toolchain.toml and guests/.cargo/config.toml
# shellcheck source=lib.sh
source "$guests/lib.sh" # replace_if_changed, workspace_tool; say, die from tools/lib.sh
forget_cargo_run_env

only=""
imports=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --only)
      only="${2:?--only needs a language: rust}"
      shift 2
      ;;
    --imports)
      imports=1
      shift
      ;;
    *) die "unknown argument $1 (usage: guests/build.sh [--only rust] [--imports])" ;;
  esac
done

if ! rustup target list --installed | grep -qx "$target"; then
  say "adding the $target target to the toolchain"
  rustup target add "$target"
fi

if ! cargo build --release --target "$target"; then
  die "cargo build of the guests (in $guests) failed; see the compiler output above"
fi

workspace_tool reconciler-slim
slim=$tool

# "<file cargo writes>:<artefact name>" for every workspace member with a cdylib target: cargo
# writes <target name, '-' as '_'>.wasm, the artefact is named after the crate's directory.
discover() {
  cargo metadata --format-version 1 --no-deps | python3 -c '
import json, os, sys
meta = json.load(sys.stdin)
members = set(meta["workspace_members"])
seen = {}
for package in meta["packages"]:
    if package["id"] not in members:
        continue
    for target in package["targets"]:
        if "cdylib" not in target["kind"]:
            continue
        directory = os.path.dirname(package["manifest_path"])
        artefact = os.path.basename(directory)
        if artefact in seen:
            sys.exit(f"two guests would both be {artefact}.wasm: {seen[artefact]} and {directory}; rename a directory")
        seen[artefact] = directory
        print(target["name"].replace("-", "_") + ":" + artefact)
if not seen:
    sys.exit("no workspace member has a cdylib target")
'
}
if ! artefacts_text="$(discover)"; then
  die "could not list the guests of the workspace in $guests (message above)"
fi
mapfile -t artefacts <<<"$artefacts_text"

built="${CARGO_TARGET_DIR:-$guests/target}/$target/release"
mkdir -p "$out/unslimmed"
for pair in "${artefacts[@]}"; do
  src="$built/${pair%%:*}.wasm"
  name="${pair#*:}.wasm"
  if [[ ! -f "$src" ]]; then
    die "cargo succeeded but $src is missing"
  fi
  # Partial files of this run's own: tests start builds concurrently.
  partial="$(mktemp "$out/unslimmed/.$name.XXXXXX")"
  cp "$src" "$partial" && chmod 644 "$partial"
  replace_if_changed "$partial" "$out/unslimmed/$name"
  partial="$(mktemp "$out/.$name.XXXXXX")"
  if ! "$slim" "$out/unslimmed/$name" "$partial"; then
    rm -f "$partial"
    die "reconciler-slim failed on $name (its message is above)"
  fi
  chmod 644 "$partial"
  replace_if_changed "$partial" "$out/$name"
done

# Guests in other languages, against the same WIT, in two lanes at once: each build is mostly one
# process at a time (componentize-py, jco, clang, Go's linker), and a cold run first installs
# componentize-py, jco and Go modules, so Python beside the rest uses both cores (every language
# guest rebuilt, tools installed: 36.9 s in one lane, 32.4 s in two, on 2 cores). Each lane
# writes its own log, shown once it ends.
if [[ -z "$only" ]]; then
  logs="$(mktemp -d)"
  lane() {
    local language
    for language in "$@"; do
      "$guests/$language/build.sh" || return
    done
  }
  lane python >"$logs/python" 2>&1 &
  python_lane=$!
  lane js c go >"$logs/js-c-go" 2>&1 &
  others_lane=$!
  failed=()
  wait "$python_lane" || failed+=(python)
  wait "$others_lane" || failed+=("js, c or go")
  cat "$logs/python" "$logs/js-c-go"
  rm -rf "$logs"
  ((${#failed[@]} == 0)) || die "the ${failed[*]} guests did not build (their output is above)"
elif [[ "$only" != rust ]]; then
  die "--only $only: only \`rust\` can be built alone"
fi

echo "guests in $out:"
for dst in "$out"/*.wasm; do
  printf '  %-20s %9d bytes\n' "$(basename "$dst")" "$(stat -c %s "$dst")"
done

if [[ "$imports" == 1 ]]; then
  python3 "$guests/tools/component-imports.py" "$out"/*.wasm
fi
