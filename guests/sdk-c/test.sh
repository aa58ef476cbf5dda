#!/usr/bin/env bash
# Unit tests of the C SDK and of the C guests, natively (no wasm), under AddressSanitizer and
# UndefinedBehaviorSanitizer when the compiler has them, so that a leak or double free of a
# binding string fails the run. Exits non-zero on any failure.
#
#   the SDK     tests/*.c against the SDK's files and the fake host (testing/: the generated
#               import functions answered from loaded objects), once per world the SDK answers
#               differently: controller, watching-controller (the `watches` export) and
#               indexing-controller (also `indexes`)
#   the guests  each guests/c/<name>/tests/*.c with that guest's .c files, the SDK and the fake
#               host, for the guest's world (its wit-world file, else controller)
#
# Each program also links the generated helper functions (the `*_free` ones), taken from the
# bindings of wit/ as they are.
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

# bindings WORLD: the world's bindings in $work/WORLD (once), with helpers.o, the generated
# helper functions compiled as they come.
bindings() {
  local world=$1 stem=${1//-/_} # the generator's file names
  local dir="$work/$world"
  [[ ! -d "$dir" ]] || return 0
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
  (cd "$dir" && "$cc" -std=c11 -g -O1 "${sanitize[@]}" -c helpers.c)
}

# run_tests WORLD NAME INCLUDE SOURCE...: SOURCE... (strictly) with the SDK and the fake host,
# against WORLD's bindings, linked into $work/WORLD/NAME/test and run.
run_tests() {
  local world=$1 name=$2 include=$3 stem=${1//-/_}
  shift 3
  bindings "$world"
  local out="$work/$world/$name"
  mkdir "$out"
  (
    cd "$out"
    "$cc" -std=c11 -g -O1 -Wall -Wextra -Werror "${sanitize[@]}" "-DRG_WORLD_H=\"$stem.h\"" \
      -I "$work/$world" -I "$here" -I "$here/testing" -I "$include" \
      -c "$here"/*.c "$here"/testing/*.c "$@"
    "$cc" "${sanitize[@]}" -o test ./*.o "$work/$world/helpers.o"
  )
  "$out/test"
}

for world in controller watching-controller indexing-controller; do
  say "the SDK, $world"
  run_tests "$world" sdk "$here/tests" "$here"/tests/*.c
done

for guest in "$repo"/guests/c/*/; do
  guest=${guest%/}
  compgen -G "$guest/tests/*.c" >/dev/null || continue
  world=controller
  if [[ -f "$guest/wit-world" ]]; then
    world="$(tr -d '[:space:]' <"$guest/wit-world")"
  fi
  say "guests/c/$(basename "$guest"), $world"
  run_tests "$world" "guest-$(basename "$guest")" "$guest" "$guest"/*.c "$guest"/tests/*.c
done
