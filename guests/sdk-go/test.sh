#!/usr/bin/env bash
# Unit tests of the Go SDK, run natively with `go test` (the *_wasip1.go files, the thin layer
# over the bindings generated into each guest's build, are left out by their GOOS suffix; a fake
# host stands in for them), after gofmt and go vet. The SDK uses the standard library only, so
# the one thing it needs is Go itself, 1.25 or newer as for the Go guests (guests/lib.sh): no
# module is downloaded, and GOTOOLCHAIN=local keeps Go from fetching another toolchain. The
# wasip1 layer is compiled by guests/go/build.sh, which builds the guests on the SDK.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
PROG=guests/sdk-go/test.sh
# shellcheck source=../../tools/lib.sh
source ../../tools/lib.sh
export GOTOOLCHAIN=local

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
