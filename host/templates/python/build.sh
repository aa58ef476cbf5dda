#!/usr/bin/env bash
# Builds {{name}}.wasm with componentize-py (pinned; installed from PyPI into the user's cache once).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
version=0.25.1
venv="${XDG_CACHE_HOME:-$HOME/.cache}/reconciler-host/componentize-py-$version"
if [[ ! -x "$venv/bin/componentize-py" ]]; then
    rm -rf "$venv" && python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "componentize-py==$version"
fi
"$venv/bin/componentize-py" -d wit -w controller componentize app -o {{name}}.wasm.partial >/dev/null
mv -f {{name}}.wasm.partial {{name}}.wasm
echo "built $(pwd)/{{name}}.wasm"
