#!/usr/bin/env bash
# Follows the quickstarts (docs/guests/<lang>.md) as written: the `sh` blocks of each page, in
# order, in an empty directory, stopping at the first failing command.
#
#   docs/guests/quickstarts.sh [rust|python|js|c|go ...]     # default: every language
#
# Needs what the pages need: `reconciler-host` (taken from this checkout's target/, built by
# `./dev build`), each language's toolchain (the project's
# guests/<lang>/build.sh installs them), and a cluster: KUBECONFIG, or else this repository's
# local control plane (`tools/control-plane/cp env`); kubectl from the local control plane's
# build when it is not on PATH. CI runs it through tests/tests/languages.rs.
set -euo pipefail

pages="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$pages/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}"
PROG=quickstarts.sh
# shellcheck source=../../tools/lib.sh
source "$repo/tools/lib.sh"

if [[ ! -x "$target/debug/reconciler-host" ]]; then
  die "$target/debug/reconciler-host is missing; run ./dev build first"
fi
export PATH="$target/debug:$PATH"
if ! command -v kubectl >/dev/null; then
  PATH="$("$repo/tools/control-plane/build.sh" --print):$PATH"
fi
if [[ -z "${KUBECONFIG:-}" ]]; then
  eval "$("$repo/tools/control-plane/cp" env)"
fi

languages=("$@")
((${#languages[@]})) || languages=(rust python js c go)
for lang in "${languages[@]}"; do
  page="$pages/$lang.md"
  [[ -f "$page" ]] || die "no quickstart $page"
  # The page's ```sh blocks, in order (other blocks are for reading only).
  steps="$(awk '/^```sh$/ {on = 1; next} /^```/ {on = 0} on' "$page")"
  dir="$(mktemp -d "${TMPDIR:-/tmp}/quickstart-$lang.XXXXXX")"
  say "$lang: following $page in $dir"
  started=$SECONDS
  # A step that fails leaves no host behind: background jobs end with the steps' shell.
  if ! (cd "$dir" && bash -euo pipefail -c "trap 'kill \$(jobs -p) 2>/dev/null || true' EXIT
$steps") >"$dir.log" 2>&1; then
    say "error: the $lang quickstart failed; its output:"
    cat "$dir.log" >&2
    [[ -f "$dir/hello/host.log" ]] && {
      echo "--- host.log:" >&2
      tail -20 "$dir/hello/host.log" >&2
    }
    exit 1
  fi
  say "$lang: ok in $((SECONDS - started)) s"
  rm -rf "$dir" "$dir.log"
done
