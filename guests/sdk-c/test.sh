#!/usr/bin/env bash
# Unit tests of the C SDK, natively (no wasm): tests/test.c against the SDK's files, a fake of the
# generated import functions (tests/fake_host.c) and the generated helper functions (the
# `*_free` ones, taken from the bindings of wit/ as they are), under AddressSanitizer and
# UndefinedBehaviorSanitizer when the compiler has them, so that a leak or double free of a
# binding string fails the run. Exits non-zero on any failure.
#
# Needs a native C compiler ($CC, else cc; gcc from Debian when there is none) and the bindings
# of `reconciler-host componentize` (the host built from this checkout, as guests/lib.sh does for
# the C guests).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
PROG="sdk-c/test.sh"
# shellcheck source=../lib.sh
source "$repo/guests/lib.sh"

cc="${CC:-cc}"
if ! command -v "$cc" >/dev/null; then
  need_debian_packages "the C SDK's tests" gcc libc6-dev
  cc=gcc
fi
componentize_tool

work="$(mktemp -d "${TMPDIR:-/tmp}/sdk-c-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT

sanitize=("-fsanitize=address,undefined" -fno-omit-frame-pointer -fno-sanitize-recover=all)
echo 'int main(void) { return 0; }' >"$work/probe.c"
if ! "$cc" "${sanitize[@]}" -o "$work/probe" "$work/probe.c" 2>/dev/null; then
  say "$cc has no AddressSanitizer here: testing without the leak checker"
  sanitize=()
fi

# Twice: against `controller`, and against `watching-controller`, whose optional `watches`
# export the SDK defines only where the world has it (tests/test.c runs the tests of each).
for world in controller watching-controller; do
  stem=${world//-/_} # the generator's file names
  dir="$work/$world"
  mkdir "$dir"
  "${componentize[@]}" bindings --lang c --wit "$repo/wit" --world "$world" --out "$dir" >/dev/null
  rm "$dir/${stem}_component_type.o" # wasm, for the real build
  {
    echo '#include <stdlib.h>'
    echo '#include <string.h>'
    echo "#include \"$stem.h\""
    echo 'void *cabi_realloc(void *ptr, size_t old_size, size_t align, size_t new_size);'
    sed -n '/^\/\/ Helper Functions/,/^\/\/ Component Adapters/p' "$dir/$stem.c"
  } >"$dir/helpers.c"
  grep -q "^void ${stem}_string_free" "$dir/helpers.c" ||
    die "the generated $stem.c no longer has its helper functions between the comments '// Helper Functions' and '// Component Adapters'; update this script"

  # The SDK and the tests strictly; the generated helpers as they come. (Objects go to $dir.)
  say "$world"
  (
    cd "$dir"
    "$cc" -std=c11 -g -O1 -Wall -Wextra -Werror "${sanitize[@]}" "-DRG_WORLD_H=\"$stem.h\"" \
      -I "$dir" -I "$here" -I "$here/tests" -c "$here"/*.c "$here"/tests/*.c
    "$cc" -std=c11 -g -O1 "${sanitize[@]}" -c helpers.c
    "$cc" "${sanitize[@]}" -o test ./*.o
  )
  "$dir/test"
done
