#!/usr/bin/env bash
# The release check: build the sdist and the wheel, `twine check` them, install the wheel into a clean
# virtualenv (no extras) and run `knowtree --version` and `knowtree sample` from it.
#   bash scripts/check_wheel.sh [PYTHON]     # PYTHON: the interpreter with `build` and `twine` (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-.venv/bin/python}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
"$PY" -m build --sdist --wheel --outdir "$OUT/dist" . >"$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 1; }
"$PY" -m twine check --strict "$OUT"/dist/*
python3 -m venv "$OUT/venv"
"$OUT/venv/bin/python" -m pip install -q "$OUT"/dist/knowtree-*.whl
want="knowtree $(sed -n 's/^__version__ = "\(.*\)"/\1/p' src/knowtree/__init__.py)"
got="$(cd "$OUT" && venv/bin/knowtree --version)"
[ "$got" = "$want" ] || { echo "knowtree --version printed '$got', expected '$want'"; exit 1; }
(cd "$OUT" && venv/bin/knowtree sample lighthouse && test -s lighthouse/handbook.md)
echo "wheel ok: $got, $(cd "$OUT/dist" && ls | tr '\n' ' ')"
