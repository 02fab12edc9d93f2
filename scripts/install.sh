#!/usr/bin/env bash
# Install knowtree with every extra into ./.venv (KT_VENV=DIR for another), safe on any x86-64 CPU.
#
# llama-cpp-python is compiled from source once (~15 min on 2 cores) with portable flags: x86-64-v3
# (AVX2, FMA, F16C), no AVX-512, no AMX. pip's default is a native build (-march=native), which crashes
# on another CPU and, on Sapphire Rapids and later, in its own AMX code path. Set CMAKE_ARGS yourself to
# build differently (e.g. CMAKE_ARGS="-DGGML_NATIVE=ON" for a CPU without AVX2). Afterwards the
# installed build is checked (python -m knowtree.llm.adapters.llama_build); a native one, such as a
# wheel pip's cache kept from an earlier build, is rebuilt portable without the cache.
# Idempotent: a second run changes nothing. Quiet unless something fails.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${KT_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
LLAMA="llama-cpp-python==0.3.36"
PORTABLE="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DLLAVA_BUILD=OFF"
USER_CMAKE_ARGS="${CMAKE_ARGS:-}"
FLAGS="${USER_CMAKE_ARGS:-$PORTABLE}"

LOG="$(mktemp "${TMPDIR:-/tmp}/knowtree-install.XXXXXX")"
trap 'rm -f "$LOG"' EXIT
quiet() {  # run a step, its output kept aside and shown only when it fails
  if ! "$@" >>"$LOG" 2>&1; then
    tail -n 60 "$LOG" >&2
    echo "install.sh: failed: $*" >&2
    exit 1
  fi
}

[ -x "$VENV/bin/python" ] || quiet "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
quiet "$PY" -m pip install -q --upgrade pip

installed="$("$PY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null || true)"
if [ "$installed" != "${LLAMA#*==}" ]; then
  echo "install.sh: building $LLAMA (CMAKE_ARGS=\"$FLAGS\"; about 15 minutes on 2 cores)" >&2
  quiet env CMAKE_ARGS="$FLAGS" "$PY" -m pip install -q "llama-cpp-python[server]==${LLAMA#*==}"
fi
quiet env CMAKE_ARGS="$FLAGS" "$PY" -m pip install -q -e ".[all,dev]"

check() { "$PY" -m knowtree.llm.adapters.llama_build; }  # 0 portable, 2 native or unsafe, 1 unreadable
rc=0
check || rc=$?
if [ "$rc" = 2 ] && [ -z "$USER_CMAKE_ARGS" ]; then
  echo "install.sh: the installed llama.cpp is a native build (likely a wheel from pip's cache): rebuilding it portable" >&2
  quiet env CMAKE_ARGS="$PORTABLE" "$PY" -m pip install -q --no-cache-dir --force-reinstall --no-deps "$LLAMA"
  rc=0
  check || rc=$?
  if [ "$rc" != 0 ]; then
    echo "install.sh: llama.cpp is still not a portable build after a rebuild without the cache; run $VENV/bin/knowtree doctor" >&2
    exit 1
  fi
elif [ "$rc" = 1 ]; then
  echo "install.sh: cannot read how llama.cpp was built; run $VENV/bin/knowtree doctor" >&2
  exit 1
fi
