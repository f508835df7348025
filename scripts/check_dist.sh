#!/usr/bin/env bash
# The package as a user gets it (make dist-check, run by .ci/run on a fresh machine):
#   1. python -m build (the sdist, then the wheel built from it), the wheel again straight from
#      the tree, twine check; scripts/check_wheel.py: the wheel holds every file of src/mnemex
#      (tokenizer, sample data, py.typed) and nothing else, and both wheels are the same;
#   2. the README's install lines from a clone, as written, and the built wheel with pipx and
#      uv tool, each in a new HOME; after each: mnemex --help, then a memory added and found by
#      a hybrid search (the local model loads from the installed package).
# Its tools (build, twine, pipx, uv) go into a throwaway venv under build/dist-check.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
WORK=$ROOT/build/dist-check
rm -rf "$WORK"
mkdir -p "$WORK"
TOOLS=$WORK/tools
"$PYTHON" -m venv "$TOOLS"
"$TOOLS/bin/pip" install --quiet "build>=1.2" "twine>=6" "pipx>=1.7" "uv>=0.5"
# New homes share the download caches of this one: a clean environment, not a cold network.
PIP_CACHE_DIR=$("$TOOLS/bin/pip" cache dir)
UV_CACHE_DIR=$("$TOOLS/bin/uv" cache dir)
export PIP_CACHE_DIR UV_CACHE_DIR UV_PYTHON_DOWNLOADS=never

echo "== build: sdist, the wheel from the sdist, the wheel from the tree"
"$TOOLS/bin/python" -m build --outdir "$WORK/dist" .
"$TOOLS/bin/python" -m build --wheel --outdir "$WORK/tree" .
"$TOOLS/bin/twine" check --strict "$WORK"/dist/*
WHEEL=$(ls "$WORK"/dist/mnemex-*.whl)
"$TOOLS/bin/python" scripts/check_wheel.py "$WHEEL" "$WORK"/tree/mnemex-*.whl "$WORK"/dist/mnemex-*.tar.gz

# Run "$@" in a new HOME (no mnemex data, no tools, no XDG folders) with its ~/.local/bin and
# the tools first on PATH, from the clone's root as the README has it.
in_new_home() {
    local name=$1
    shift
    local home="$WORK/home-$name"
    mkdir -p "$home/.local/bin"
    (
        cd "$ROOT"
        env -u MNEMEX_HOME -u MNEMEX_DB -u MNEMEX_EMBEDDER -u MNEMEX_NAMESPACE -u MNEMEX_CONFIG \
            -u XDG_DATA_HOME -u XDG_CONFIG_HOME -u XDG_CACHE_HOME -u VIRTUAL_ENV -u PIPX_HOME \
            -u PIPX_BIN_DIR -u UV_TOOL_DIR -u UV_TOOL_BIN_DIR \
            HOME="$home" PATH="$home/.local/bin:$TOOLS/bin:$PATH" bash -euo pipefail -c "$*"
    )
}

# The installed command, as a user runs it: help, version, a memory added, then found.
try_command() {
    local name=$1 command=$2
    echo "== $name: $command --help, add, search"
    in_new_home "$name" "
        export PATH=\"$(dirname "$command"):\$PATH\"
        test \"\$(command -v mnemex)\" = '$command'
        mnemex --help > /dev/null
        mnemex --version
        id=\$(mnemex add 'Invoice PDFs render slowly because of their embedded fonts' --kind gotcha)
        mnemex search 'why are the invoice PDFs slow?' --json > search.json
        python3 - \"\$id\" search.json <<'PY'
import json, sys
found = json.load(open(sys.argv[2]))
assert found['mode_used'] == 'hybrid', found
assert found['hits'] and found['hits'][0]['id'] == sys.argv[1], found
print('found', sys.argv[1], 'by', found['mode_used'], 'search')
PY
        rm search.json"
}

# The README's install lines from a clone, as written.
in_new_home pipx 'pipx install ".[embed,mcp]"'
try_command pipx "$WORK/home-pipx/.local/bin/mnemex"
in_new_home uv 'uv tool install ".[embed,mcp]"'
try_command uv "$WORK/home-uv/.local/bin/mnemex"
in_new_home pip "python3 -m venv \"\$HOME/env\" && . \"\$HOME/env/bin/activate\" && pip install \".[embed,mcp]\""
try_command pip "$WORK/home-pip/env/bin/mnemex"
in_new_home pip "\"\$HOME/env/bin/python\" -c 'import mnemex; print(mnemex.__version__)'"

# The wheel CI built, as an index will serve it.
in_new_home pipx-wheel "pipx install '$WHEEL[embed,mcp]'"
try_command pipx-wheel "$WORK/home-pipx-wheel/.local/bin/mnemex"
in_new_home uv-wheel "uv tool install 'mnemex[embed,mcp] @ $WHEEL'"
try_command uv-wheel "$WORK/home-uv-wheel/.local/bin/mnemex"
echo "dist-check: the sdist and wheel build, pass twine, and install and run five ways"
