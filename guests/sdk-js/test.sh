#!/usr/bin/env bash
# Unit tests of the JavaScript SDK (reconciler-guest/), natively, with no component toolchain:
#   1. node's test runner over test/*.test.js (the SDK's tests, and those of the repository's
#      JavaScript guests), the component imports (`reconciler:api/...`) answered by the public
#      fake host (testing/, `reconciler-guest/testing`, wired in by test/setup.js);
#   2. `tsc` over the types (reconciler-guest/index.d.ts, testing/index.d.ts), a file using every
#      export (test/types.ts) and the repository's JavaScript guests (tsconfig.json).
# TypeScript is pinned by package-lock.json here and installed from npm into
# ${XDG_CACHE_HOME:-~/.cache}/reconciler-host/sdk-js-<lock hash>/ when missing. Node 20+.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PROG=guests/sdk-js/test.sh
# shellcheck source=../../tools/lib.sh
source "$here/../../tools/lib.sh"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  die "node 20+ and npm are needed (the JavaScript guests need them too)"
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
((major >= 20)) || die "node $(node --version) is too old: node 20+ is needed (module.register)"

cd "$here"
say "node --test (the SDK against a fake host)"
node --import ./test/setup.js --test test/*.test.js

lock_hash="$(cat package.json package-lock.json | sha256sum | cut -c1-16)"
installed="${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/sdk-js-$lock_hash"
if [[ ! -x "$installed/node_modules/.bin/tsc" ]]; then
  say "installing typescript (package-lock.json) into $installed"
  mkdir -p "$(dirname "$installed")"
  partial="$(mktemp -d "$installed.XXXXXX")" # its own, should two runs install at once
  cp package.json package-lock.json "$partial/"
  if ! (cd "$partial" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
    rm -rf "$partial"
    die "npm ci could not install the toolchain of $here/package-lock.json"
  fi
  rm -rf "$installed"
  mv -T "$partial" "$installed" 2>/dev/null || rm -rf "$partial" # or another run's won
fi
say "tsc (the types, and the guests against them)"
"$installed/node_modules/.bin/tsc" -p .
say "ok"
