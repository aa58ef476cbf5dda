#!/usr/bin/env bash
# Builds every Python guest (guests/python/<name>/app.py) into <repo>/target/guests/<name>.wasm
# with componentize-py, against the same wit/ as every other guest.
#
# componentize-py (pinned below) is installed from PyPI into a virtualenv in the user's cache,
# once. A guest is rebuilt only when its sources, the WIT or the tool version changed (a stamp
# next to the artefact records what it was built from), and replaced by rename.
set -euo pipefail

COMPONENTIZE_PY_VERSION=0.25.1

python_guests="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$python_guests/../.." && pwd)"
out="$repo/target/guests"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/componentize-py-$COMPONENTIZE_PY_VERSION"
tool="$venv/bin/componentize-py"

if [[ ! -x "$tool" ]]; then
    echo "python/build.sh: installing componentize-py $COMPONENTIZE_PY_VERSION into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    if ! "$venv/bin/pip" install --quiet "componentize-py==$COMPONENTIZE_PY_VERSION"; then
        rm -rf "$venv"
        echo "python/build.sh: error: pip could not install componentize-py $COMPONENTIZE_PY_VERSION" >&2
        exit 1
    fi
fi

mkdir -p "$out"
for dir in "$python_guests"/*/; do
    name="$(basename "$dir")"
    [[ -f "$dir/app.py" ]] || continue
    dst="$out/$name.wasm"
    stamp="$(cat "$dir"/*.py "$repo"/wit/*.wit <(echo "$COMPONENTIZE_PY_VERSION") | sha256sum | cut -d' ' -f1)"
    if [[ -f "$dst" && "$(cat "$dst.stamp" 2>/dev/null)" == "$stamp" ]]; then
        continue
    fi
    # The world is `controller`; a guest that needs the network backend would say so here.
    if ! (cd "$dir" && "$tool" -d "$repo/wit" -w controller componentize app -o "$dst.partial" >/dev/null); then
        rm -f "$dst.partial"
        echo "python/build.sh: error: componentize-py failed for $dir" >&2
        exit 1
    fi
    mv -f "$dst.partial" "$dst"
    echo "$stamp" >"$dst.stamp"
done
