# shellcheck shell=bash
# How a guest in C, Go, JavaScript or Python becomes a component: one recipe per language, the
# same for the repository's guests and for a project `reconciler-host new` writes (it puts a
# copy of this file beside the project's build.sh). Rust guests: guests/build.sh.
#
# Two layouts:
#   the repository  guests/<lang>/build.sh runs `build_language_guests <lang> <its directory>`:
#                   every guests/<lang>/<name>/ holding a guest is built against wit/ into
#                   target/guests/<name>-<lang>.wasm (work files: target/guests-build/<lang>/).
#   a project       its build.sh runs `build_project_guest <lang> <its directory> <name>`: the
#                   directory is the guest, built against its wit/ into <name>.wasm (work files:
#                   build/).
# Artefacts are named `<name>-<lang>.wasm` in the repository whatever the language, so that no
# build of a guest overwrites another language's (Rust's is `<name>.wasm`); each is deployed as
# the `<name>.wasm` of the guest it declares (host/src/supply/guest_set/source.rs).
#
# Every language, the same way:
#   world      `controller`, or the one named in the guest's `wit-world` file
#   stamp      a hash of what the build reads: the guest's sources (LANG_sources), its world, the
#              WIT, the toolchain, the calling build.sh and this file; a guest whose stamp and
#              artefact are there is not rebuilt
#   output     each build works in a directory of its own and writes the component to a
#              temporary name beside the artefact, renamed over it only when the bytes differ:
#              concurrent builds never meet, and a host watching the directory never sees a
#              partial file or a spurious change
#
# Sourcing this file only defines functions (and the componentize-py pin).

guests_lib="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
COMPONENTIZE_PY_VERSION=0.25.1

# Set by the entry points, read by the recipes:
#   PROG       what messages start with (`c/build.sh`, `build.sh`)
#   here       the directory of the calling build.sh (guests/<lang>, or the project): where a
#              language's shared files are (go: gc.go; js: package.json, package-lock.json)
#   repo       the repository, or empty in a project
#   wit        the WIT directory
#   work       where build directories and stamps go
#   toolchain  what identifies the language's tools (set by LANG_toolchain, part of the stamp)
PROG=${PROG:-guests/lib.sh}

# Messages and Debian packages: the repository's tools/lib.sh. A project that `reconciler-host
# new` wrote holds this file alone, so it carries a copy of the three functions the recipes use
# (tests/tests/scripts.rs keeps it the same as tools/lib.sh's).
guests_dir="$(dirname "$guests_lib")"
if [[ "$(basename "$guests_dir")" == guests && -f "$guests_dir/../tools/lib.sh" ]]; then
  # shellcheck source=../tools/lib.sh
  source "$guests_dir/../tools/lib.sh"
else
  say() { echo "$PROG: $*" >&2; }
  die() {
    echo "$PROG: error: $*" >&2
    exit 1
  }

  # need_debian_packages [--no-recommends] WHO PACKAGE...: as tools/lib.sh's.
  need_debian_packages() {
    local recommends=() who missing=() package
    if [[ "$1" == --no-recommends ]]; then
      recommends=(--no-install-recommends)
      shift
    fi
    who=$1
    shift
    command -v dpkg-query >/dev/null || return 0 # not Debian: the tools must be on PATH
    for package in "$@"; do
      dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
    done
    ((${#missing[@]})) || return 0
    if [[ "$(id -u)" != 0 ]]; then
      die "$who need ${missing[*]}; install them with: sudo apt-get install ${missing[*]}"
    fi
    say "installing ${missing[*]} (Debian)"
    # Tests run in parallel and two may install at once; apt refuses a second apt-get outright
    # ("Could not get lock"), so ours take turns and wait up to 10 minutes for anyone else's.
    if ! (
      flock 9
      apt-get -o DPkg::Lock::Timeout=600 update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
          "${recommends[@]}" "${missing[@]}" >/dev/null
    ) 9>/var/lock/reconciler-host-apt.lock; then
      die "apt-get could not install ${missing[*]}"
    fi
  }
fi

# replace_if_changed NEW DST: moves NEW over DST (a rename: atomic) unless their bytes are
# equal, then drops NEW, so DST keeps its time and a watcher sees no change.
replace_if_changed() {
  if cmp -s "$1" "$2"; then rm -f "$1"; else mv -f "$1" "$2"; fi
}

# ---------------------------------------------------------------------------------------------
# Entry points

# build_language_guests LANG DIR: the repository's guests in DIR (guests/LANG).
build_language_guests() {
  local lang=$1 dir out
  here=$2
  PROG="$lang/build.sh"
  repo="$(cd "$here/../.." && pwd)"
  wit="$repo/wit"
  work="$repo/target/guests-build/$lang"
  out="$repo/target/guests"
  "${lang}_toolchain"
  mkdir -p "$out"
  for dir in "$here"/*/; do
    "${lang}_is_guest" "$dir" || continue
    build_guest "$lang" "$dir" "$out/$(basename "$dir")-$lang.wasm"
  done
}

# build_project_guest LANG DIR NAME: the project in DIR is one guest, built into DIR/NAME.wasm.
build_project_guest() {
  local lang=$1 name=$3
  here=$2
  PROG=build.sh
  repo=
  wit="$here/wit"
  work="$here/build"
  "${lang}_is_guest" "$here" || die "$here holds no $lang guest (see lib.sh: ${lang}_is_guest)"
  "${lang}_toolchain"
  build_guest "$lang" "$here" "$here/$name.wasm"
  echo "built $here/$name.wasm"
}

# build_guest LANG SRC DST: SRC's component at DST, unless its stamp says DST is up to date.
build_guest() {
  local lang=$1 src=${2%/} dst=$3 world=controller stamp stamp_file build partial file
  if [[ -f "$src/wit-world" ]]; then
    world="$(tr -d '[:space:]' <"$src/wit-world")"
  fi
  stamp="$(
    {
      echo "world $world"
      "${lang}_sources" "$src" | while IFS= read -r file; do
        echo "file $file"
        cat "$src/$file"
      done
      cat "$wit"/*.wit "$wit"/deps/*.wit 2>/dev/null
      echo "$toolchain"
      cat "$here/build.sh" "$guests_lib"
    } | sha256sum | cut -d' ' -f1
  )"
  stamp_file="$work/$(basename "$dst").stamp"
  if [[ -f "$dst" && "$(cat "$stamp_file" 2>/dev/null)" == "$stamp" ]]; then
    return 0
  fi
  mkdir -p "$work"
  build="$(mktemp -d "$work/$(basename "$dst" .wasm).XXXXXX")"
  partial="$(mktemp "$(dirname "$dst")/.$(basename "$dst").XXXXXX")"
  if ! "${lang}_build" "$src" "$world" "$build" "$partial" || [[ ! -s "$partial" ]]; then
    # The last build's component would otherwise pass for this source's (a `check` after a
    # failed build checked the old one).
    rm -f "$partial" "$dst" "$stamp_file"
    die "building $src failed (the message is above; the build directory is $build; $dst removed)"
  fi
  chmod 644 "$partial"
  replace_if_changed "$partial" "$dst"
  partial="$(mktemp "$stamp_file.XXXXXX")"
  echo "$stamp" >"$partial"
  chmod 644 "$partial"
  mv -f "$partial" "$stamp_file"
  rm -rf "$build"
}

# workspace_tool NAME: sets `tool` to the repository's binary NAME (reconciler-slim,
# reconciler-host), built with every binary of the cargo workspace in the dev profile
# (dependencies optimised). One feature set for the host, its tests and these tools means
# wasmtime and the rest are compiled once; a `--release -p` build of a tool alone compiled them a
# second time (several minutes of a cold `./dev test`).
# Built once per guests/build.sh: the language builds it runs (each guest's toolchain step)
# inherit RECONCILER_WORKSPACE_BUILT instead of asking cargo again (~0.4 s a time).
workspace_tool() {
  local target_dir="${CARGO_TARGET_DIR:-$repo/target}"
  if [[ "${RECONCILER_WORKSPACE_BUILT:-}" != "$target_dir" ]]; then
    forget_cargo_run_env
    # Not --quiet: cold, this is most of a first build (wasmtime, kube), and its progress shows.
    if ! (cd "$repo" && cargo build --workspace --bins); then
      die "cargo build of the workspace's binaries (for $1) failed; see the compiler output above"
    fi
    export RECONCILER_WORKSPACE_BUILT="$target_dir"
  fi
  tool="$target_dir/debug/$1"
}

# componentize_tool: sets `componentize` to the command of the C and Go recipes' component
# steps, `reconciler-host componentize` (C and Go bindings from the WIT; a wasip1 core module
# wrapped into a component with the WASI preview1 reactor adapter of the host's wasmtime release;
# a Go module pre-initialised), and `componentize_id` to what identifies those steps in a stamp.
# The repository builds reconciler-host and identifies the steps by their crate
# (tools/componentize) and Cargo.lock, so that an edit elsewhere in the host rebuilds no guest. A
# project takes $RECONCILER_HOST or the reconciler-host on PATH, identified by its bytes.
componentize_tool() {
  local host
  if [[ -n "$repo" ]]; then
    workspace_tool reconciler-host
    componentize=("$tool" componentize)
    componentize_id="$(cat "$repo/tools/componentize/Cargo.toml" "$repo"/tools/componentize/src/*.rs \
      "$repo/Cargo.lock" | sha256sum)"
    return
  fi
  if ! host="$(command -v "${RECONCILER_HOST:-reconciler-host}")"; then
    die "reconciler-host is not on PATH (its \`componentize\` builds C and Go guests): put it there (\`cargo build --release -p reconciler-host\` in a reconciler-host checkout builds target/release/reconciler-host), or name it with RECONCILER_HOST"
  fi
  if ! "$host" componentize --help >/dev/null 2>&1; then
    die "$host has no \`componentize\` command, which this lib.sh needs: use a newer reconciler-host, or name one with RECONCILER_HOST"
  fi
  componentize=("$host" componentize)
  componentize_id="$(sha256sum <"$host")"
}

# ---------------------------------------------------------------------------------------------
# C: every *.c of the guest and of the C SDK (c_sdk: guests/sdk-c in the repository, sdk/ in a
# project; a project without one builds without it), compiled by clang-19 for wasm32-wasi as a
# reactor (a library the host calls, no `_start`) against Debian's wasi-libc (wasip1; Debian has
# no wasip2 sysroot), with the bindings of `reconciler-host componentize` (the generator crate of
# `wit-bindgen c`; the SDK includes the world's header, named by RG_WORLD_H), then wrapped into
# a component. The compiler comes from Debian, installed when missing. The SDK's files are part
# of the toolchain, so of every C guest's stamp.

c_is_guest() { compgen -G "${1%/}/*.c" >/dev/null; }
c_sources() { (cd "$1" && compgen -G '*.[ch]' | LC_ALL=C sort); }
# c_sdk_files: the SDK's files in $c_sdk, the ones a project holds in sdk/ (its tests are not).
c_sdk_files() { [[ ! -f "$c_sdk/reconciler.h" ]] || (cd "$c_sdk" && compgen -G '*.[ch]' | LC_ALL=C sort); }

c_toolchain() {
  local file
  need_debian_packages "the C guests" clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32
  componentize_tool
  c_sdk="${repo:+$repo/guests/sdk-c}"
  c_sdk="${c_sdk:-$here/sdk}"
  toolchain="$(
    clang-19 --version | sed -n 1p # not head: SIGPIPE under pipefail
    echo "$componentize_id"
    c_sdk_files | while IFS= read -r file; do
      echo "sdk $file"
      cat "$c_sdk/$file"
    done
  )"
}

c_build() {
  local src=$1 world=$2 build=$3 out=$4 sdk=()
  local stem=${world//-/_} # the generator's file names
  mkdir "$build/bindings"
  "${componentize[@]}" bindings --lang c --wit "$wit" --world "$world" --out "$build/bindings" || return
  if [[ -f "$c_sdk/reconciler.h" ]]; then
    sdk=(-I "$c_sdk" "-DRG_WORLD_H=\"$stem.h\"" "$c_sdk"/*.c)
  fi
  # -flto: the SDK's small functions inline across files (the greeter: ~5 % smaller, ~1 µs
  # less per reconcile).
  clang-19 --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -Os -flto -Wall -Werror \
    -Wl,--strip-all -I "$build/bindings" -o "$build/core.wasm" "${sdk[@]}" \
    "$src"/*.c "$build/bindings/$stem.c" "$build/bindings/${stem}_component_type.o" || return
  "${componentize[@]}" component "$build/core.wasm" --out "$out"
}

# ---------------------------------------------------------------------------------------------
# Go: the guest's module (go.mod, go.sum, its *.go) copied into the build directory with the
# Go SDK (go_sdk_files; a project holds it among its own sources), the bindings of its world
# from `reconciler-host componentize` (the generator crate of `wit-bindgen go`; its go.mod is
# dropped, the guest's own pins go.bytecodealliance.org/pkg) and gc.go (why: see that file);
# `GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared` makes a core module (the
# exports are `//go:wasmexport` functions; -checklinkname=0 lets the bindings reach the
# runtime), which `reconciler-host componentize` wraps into a component with the world embedded.
# Go (>= 1.25) is the machine's; modules come through the Go module proxy into Go's own cache,
# checked against the guest's go.sum.
# Pre-initialisation, opt-in (a `preinit` file in the guest, or go_preinit=1 around
# build_guest): built with -tags reconciler_preinit (the SDK's preinit_wasip1.go), the core
# module is snapshotted after Go's init by `reconciler-host componentize preinit` before it is
# made a component; what that freezes (environment, clock base, seeds): docs/guests/go.md.

go_is_guest() { [[ -f "$1/go.mod" ]]; }
go_sources() {
  (
    cd "$1" &&
      {
        echo go.mod
        [[ ! -f go.sum ]] || echo go.sum
        [[ ! -f preinit ]] || echo preinit
        find . -path ./build -prune -o -type f -name '*.go' -print | sed 's#^\./##'
      } | LC_ALL=C sort
  )
}

# go_sdk_files: the repository's Go SDK (guests/sdk-go) as paths inside a guest's module, where
# it is copied: package `reconciler` (and `reconciler/networkbackend`), and the files of packages
# export_reconciler_api_reconciler, export_reconciler_api_watches and
# export_reconciler_api_indexes that hand the component's exports to the guest registered with
# reconciler.Register. Part of every Go guest's stamp.
go_sdk_files() {
  (cd "$repo/guests/sdk-go" &&
    find reconciler export_reconciler_api_reconciler export_reconciler_api_watches \
      export_reconciler_api_indexes -type f \
      -name '*.go' ! -name '*_test.go' | LC_ALL=C sort)
}

# go_copy FROM TO: copies the files named on stdin (paths inside FROM) to the same paths in TO.
go_copy() {
  local from=$1 to=$2 file
  while IFS= read -r file; do
    mkdir -p "$to/$(dirname "$file")"
    cp "$from/$file" "$to/$file" || return
  done
}

go_toolchain() {
  local version minor
  command -v go >/dev/null || die "go is not installed (Go 1.25 or newer is needed for the Go guests)"
  version="$(go env GOVERSION)"
  minor="${version#go1.}"
  if [[ "$version" != go1.* || "${minor%%.*}" -lt 25 ]]; then
    die "$version is too old: the Go guests need Go 1.25 or newer (//go:wasmexport with -buildmode=c-shared)"
  fi
  componentize_tool
  toolchain="$(
    echo "$version"
    cat "$here/gc.go"
    echo "$componentize_id"
    [[ -z "$repo" ]] || go_sdk_files | while IFS= read -r file; do
      echo "sdk $file"
      cat "$repo/guests/sdk-go/$file"
    done
  )"
}

go_build() {
  local src=$1 world=$2 build=$3 out=$4 core=core.wasm tags=()
  if [[ -f "$src/preinit" || -n "${go_preinit:-}" ]]; then
    core="core-init.wasm"
    tags=(-tags reconciler_preinit)
  fi
  mkdir "$build/module"
  go_sources "$src" | go_copy "$src" "$build/module" || return
  if [[ -n "$repo" ]]; then
    go_sdk_files | go_copy "$repo/guests/sdk-go" "$build/module" || return
  fi
  "${componentize[@]}" bindings --lang go --wit "$wit" --world "$world" --out "$build/bindings" || return
  rm "$build/bindings/go.mod"
  cp -r "$build/bindings/." "$build/module/" || return
  # The SDK's `watches` and `indexes` exports, in a world without them: they would import
  # bindings that are not there, which `go build .` ignores but `go mod tidy` (the hint below)
  # does not.
  [[ -d "$build/module/reconciler_api_watches" ]] || rm -rf "$build/module/export_reconciler_api_watches"
  [[ -d "$build/module/reconciler_api_indexes" ]] || rm -rf "$build/module/export_reconciler_api_indexes"
  # A project is itself the module that holds gc.go.
  [[ "$src" -ef "$here" ]] || cp "$here/gc.go" "$build/module/reconciler_gc.go"
  if ! (cd "$build/module" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath \
    "${tags[@]}" -ldflags='-checklinkname=0 -s -w' -o "../$core" .) 2>"$build/go-build.err"; then
    cat "$build/go-build.err" >&2
    if grep -q 'go\.sum' "$build/go-build.err"; then
      say "a missing go.sum entry: run \`GONOSUMDB=go.bytecodealliance.org go mod tidy\` in $build/module and copy its go.sum to $src"
    fi
    return 1
  fi
  cat "$build/go-build.err" >&2
  if [[ "$core" != core.wasm ]]; then
    "${componentize[@]}" preinit "$build/$core" --out "$build/core.wasm" || return
  fi
  "${componentize[@]}" component "$build/core.wasm" --wit "$wit" --world "$world" --out "$out"
}

# ---------------------------------------------------------------------------------------------
# JavaScript: app.js and the modules it imports, made a component by jco's QuickJS backend. The
# guest's *.js (in subdirectories too) are copied into the build directory; in the repository
# the SDK (guests/sdk-js/reconciler-guest/*.js) is copied beside them as reconciler-guest/, which
# a project holds itself (`reconciler-host new` writes it). jco resolves the relative imports
# (`./reconciler-guest/index.js`) when it snapshots the guest, so no bundler is needed and the
# SDK's modules cost nothing per reconcile. The repository's SDK is part of the toolchain's
# identity (the stamp), so changing it rebuilds every JavaScript guest.
#
# The toolchain is the one package.json + package-lock.json (beside build.sh) pin: jco 1.35.0,
# with preview2-shim held at 0.25.0, without which `jco componentize` fails with "failed to get
# path metadata". It is installed from the lockfile into the user's cache, once per lockfile
# (`npm install`, not `npm ci`: npm 11's `ci` insists on lock entries for every other platform's
# optional binaries).
#
# QuickJS, not StarlingMonkey: 1.6 MB and ~5 s to build instead of 12 MB and ~55 s, and a first
# compile in the host of ~3 s instead of ~17 s. `--backend-qjs-disable-async`: the default build
# uses the component model's async intrinsics (`task.cancel`), which the host does not enable.
#
# Except for the world `http-controller` (outbound HTTP): QuickJS cannot build a component that
# imports wasi:http (jco 1.35's componentize-qjs 0.4.5 snapshots the guest in a linker that
# stubs unknown imports with resource types of its own, and wasi:http/types' streams must be
# wasi:io's: "mismatched resource types"), and it has neither `fetch` nor an event loop. Such a
# guest is built with jco's StarlingMonkey backend (the same pinned jco): `fetch` through
# wasi:http, an `async reconcile` awaited by its event loop, ~15 MB and ~15 s to build. Its
# bundler (`--bundle`) resolves the relative imports, the contract's modules left to the bindings.

js_is_guest() { [[ -f "$1/app.js" ]]; }
js_sources() {
  (cd "$1" && find . \( -path ./build -o -path ./node_modules \) -prune -o -type f -name '*.js' -print |
    sed 's#^\./##' | LC_ALL=C sort)
}
js_sdk="guests/sdk-js/reconciler-guest" # in the repository

js_toolchain() {
  local lock_hash installed partial
  command -v npm >/dev/null || die "npm is not installed (node 20+ and npm are needed for the JavaScript guests)"
  lock_hash="$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)"
  installed="${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/jco-$lock_hash"
  jco="$installed/node_modules/.bin/jco"
  if [[ ! -x "$jco" ]]; then
    say "installing jco (package-lock.json) into $installed"
    mkdir -p "$(dirname "$installed")"
    partial="$(mktemp -d "$installed.XXXXXX")" # its own, should two builds install at once
    cp "$here/package.json" "$here/package-lock.json" "$partial/"
    if ! (cd "$partial" && npm install --no-audit --no-fund --no-save --loglevel=error >/dev/null); then
      rm -rf "$partial"
      die "npm install could not install the toolchain of $here/package-lock.json"
    fi
    rm -rf "$installed"                                            # a broken one (no jco in it)
    mv -T "$partial" "$installed" 2>/dev/null || rm -rf "$partial" # or another build's won
  fi
  toolchain="jco $lock_hash"
  if [[ -n "$repo" ]]; then
    toolchain+=$'\n'"$(cd "$repo/$js_sdk" && sha256sum -- *.js)"
  fi
}

# js_exports SRC NAME: whether SRC/app.js exports NAME (`export const NAME = ...`, or NAME in an
# `export {...}` list).
js_exports() {
  grep -Eq "^[[:space:]]*export[[:space:]]+((const|let|var|function)[[:space:]]+$2\\b|\\{[^}]*\\b$2\\b)" "$1/app.js"
}

# js_check_exports SRC WORLD: that app.js makes the optional exports its world has, and no
# others: `watches` (defineWatches) in `watching-controller`; `indexes` (defineIndexes) in
# `indexing-controller`, with `watches` there when it has watches beyond its indexes. jco checks
# neither way: an export the world lacks is dropped without a word (the guest would run without
# its watches or indexes), and a world export app.js lacks traps when the host calls it.
js_check_exports() {
  local src=$1 world=$2 name wants needs
  for name in watches indexes; do
    case "$name $world" in
      "watches watching-controller" | "indexes indexing-controller") wants=true ;;
      "watches indexing-controller") continue ;; # either way: js_wit
      *) wants=false ;;
    esac
    if [[ "$wants" == true ]] && ! js_exports "$src" "$name"; then
      say "the world $world exports \`$name\`, but $src/app.js does not: add \`export const $name = define${name^}([...])\`, or build for \`controller\` (no wit-world file)"
      return 1
    fi
    if [[ "$wants" == false ]] && js_exports "$src" "$name"; then
      needs=watching-controller
      [[ "$name" == watches ]] || needs=indexing-controller
      say "$src/app.js exports \`$name\`, but the world $world does not, so the host would never see them: write \`$needs\` into $src/wit-world"
      return 1
    fi
  done
}

# js_wit BUILD WORLD SRC: a WIT directory in BUILD whose world `guest` is the contract's WORLD and
# wasi:cli/environment. jco binds only what the world imports, and the SDK's `getenv` (env.js,
# which imports this version) reads the grant's `env` through it. An `indexing-controller` guest
# whose app.js exports no `watches` gets `controller` and the `indexes` export alone: the host
# asks a component for watches only when it exports them.
js_wit() {
  local build=$1 world=$2 src=$3 contract
  mkdir -p "$build/wit/deps" || return
  cp "$wit"/*.wit "$wit"/deps/*.wit "$build/wit/deps/" || return
  contract="include reconciler:api/$world@0.1.0;"
  if [[ "$world" == indexing-controller ]] && ! js_exports "$src" watches; then
    contract=$'include reconciler:api/controller@0.1.0;\n  export reconciler:api/indexes@0.1.0;'
  fi
  printf 'package local:guest;\n\nworld guest {\n  %s\n  import wasi:cli/environment@0.2.12;\n}\n' \
    "$contract" >"$build/wit/guest.wit"
}

js_build() {
  local src=$1 world=$2 build=$3 out=$4 file
  js_check_exports "$src" "$world" || return
  js_wit "$build" "$world" "$src" || return
  while IFS= read -r file; do
    mkdir -p "$build/src/$(dirname "$file")"
    cp "$src/$file" "$build/src/$file" || return
  done < <(js_sources "$src")
  if [[ -n "$repo" ]]; then
    mkdir -p "$build/src/reconciler-guest"
    cp "$repo/$js_sdk"/*.js "$build/src/reconciler-guest/" || return
  fi
  # From the entry's own directory: jco 1.35 resolves an entry path with a directory in it twice.
  if [[ "$world" == http-controller ]]; then
    echo 'export default { external: [/^(reconciler|wasi):/] };' >"$build/bundle.config.mjs"
    (cd "$build/src" && "$jco" componentize app.js --wit ../wit --world-name guest \
      --disable fetch-event --bundle --bundle-config ../bundle.config.mjs -o "$out" >/dev/null)
  else
    (cd "$build/src" && "$jco" componentize app.js --wit ../wit --world-name guest \
      --backend qjs --backend-qjs-disable-async -o "$out" >/dev/null)
  fi
}

# ---------------------------------------------------------------------------------------------
# Python: the module `app` (app.py and the *.py beside it), made a component by componentize-py
# (pinned above), installed from PyPI into a virtualenv in the user's cache, once. The SDK, the
# package `reconciler_guest`, is on componentize-py's python path: guests/sdk-python/src in the
# repository, the project itself in a project (`reconciler-host new` writes reconciler_guest/
# beside app.py; a project without it builds as before). Its files are part of the toolchain,
# so an SDK change rebuilds every guest.

python_is_guest() { [[ -f "$1/app.py" ]]; }
python_sources() { (cd "$1" && compgen -G '*.py' | LC_ALL=C sort); }

# pip_tool PACKAGE VERSION: a virtualenv in the user's cache holding PACKAGE==VERSION, made
# once; sets `venv` to it.
pip_tool() {
  venv="${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/$1-$2"
  if [[ ! -x "$venv/bin/$1" ]]; then
    say "installing $1 $2 into $venv"
    rm -rf "$venv"
    if ! { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet "$1==$2"; }; then
      rm -rf "$venv"
      die "pip could not install $1 $2"
    fi
  fi
}

python_toolchain() {
  local venv
  pip_tool componentize-py "$COMPONENTIZE_PY_VERSION"
  componentize_py="$venv/bin/componentize-py"
  python_sdk="${repo:+$repo/guests/sdk-python/src}"
  python_sdk="${python_sdk:-$here}"
  toolchain="componentize-py $COMPONENTIZE_PY_VERSION"
  if [[ -d "$python_sdk/reconciler_guest" ]]; then
    toolchain+=$'\n'"reconciler_guest $(cd "$python_sdk" && sha256sum reconciler_guest/*.py | sha256sum)"
  fi
}

# python_build SRC WORLD BUILD OUT. componentize-py wants a class in app.py for every export of
# the world; an `indexing-controller` guest that binds no `Watches` (computed indexes, no watches
# of its own) is built for `controller` and the `indexes` export alone, as the Rust SDK's
# export_indexing! builds one: the host asks a component for watches only when it exports them.
python_build() {
  local src=$1 world=$2 build=$3 out=$4 path=(-p .) contract=$wit
  [[ "$python_sdk" -ef "$src" ]] || path+=(-p "$python_sdk")
  if [[ "$world" == indexing-controller ]] && ! grep -Eq '^Watches[[:space:]]*=' "$src/app.py"; then
    contract="$build/wit"
    mkdir -p "$contract/deps" || return
    cp "$wit"/*.wit "$wit"/deps/*.wit "$contract/deps/" || return
    printf 'package local:guest;\n\nworld guest {\n  include reconciler:api/controller@0.1.0;\n  export reconciler:api/indexes@0.1.0;\n}\n' \
      >"$contract/guest.wit"
    world=guest
  fi
  (cd "$src" && "$componentize_py" -d "$contract" -w "$world" componentize app "${path[@]}" -o "$out" >/dev/null)
}
