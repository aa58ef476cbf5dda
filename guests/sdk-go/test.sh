#!/usr/bin/env bash
# Unit tests of the Go SDK, run natively with `go test` (the *_wasip1.go files, the thin layer
# over the bindings generated into each guest's build, are left out by their GOOS suffix; the
# SDK's fake host, fakehost.go, stands in for them), after gofmt and go vet. Then the native
# tests of every Go guest that has some (guests/go/*/ with a *_test.go): each guest's module
# is put together in a scratch directory with the SDK copied in, as its build does
# (guests/lib.sh: go_sources, go_sdk_files), and vetted and tested there. The SDK uses the
# standard library only, and a guest's native code imports no binding, so the one thing this
# needs is Go itself, 1.25 or newer as for the Go guests: no module is downloaded
# (GOFLAGS=-mod=mod is not set, and GOPROXY=off makes sure), and GOTOOLCHAIN=local keeps Go
# from fetching another toolchain. The wasip1 layer is compiled by guests/go/build.sh, which
# builds the guests on the SDK.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
# shellcheck source=../lib.sh
source ../lib.sh
PROG=guests/sdk-go/test.sh
export GOTOOLCHAIN=local GOPROXY=off

command -v go >/dev/null || die "go is not installed (Go 1.25 or newer is needed)"
version="$(go env GOVERSION)"
minor="${version#go1.}"
if [[ "$version" != go1.* || "${minor%%.*}" -lt 25 ]]; then
  die "$version is too old: the Go SDK needs Go 1.25 or newer"
fi
unformatted="$(gofmt -l .)"
if [[ -n "$unformatted" ]]; then
  die "not gofmt-formatted (run gofmt -w on them): $unformatted"
fi
go vet ./...
go test ./...

repo="$(cd ../.. && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for guest in "$repo"/guests/go/*/; do
  guest=${guest%/}
  # grep without -q: it reads the whole list, so no SIGPIPE fails the pipe.
  if ! go_is_guest "$guest" || ! go_sources "$guest" | grep '_test\.go$' >/dev/null; then
    continue
  fi
  unformatted="$(cd "$guest" && gofmt -l .)"
  [[ -z "$unformatted" ]] || die "not gofmt-formatted (run gofmt -w on them, in $guest): $unformatted"
  module="$scratch/$(basename "$guest")"
  go_sources "$guest" | go_copy "$guest" "$module"
  go_sdk_files | go_copy "$repo/guests/sdk-go" "$module"
  say "the native tests of ${guest#"$repo"/}"
  (cd "$module" && go vet ./... && go test ./...)
done
