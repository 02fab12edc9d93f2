"""scripts/install.sh, run against a fake interpreter that records what it is asked to do."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "install.sh"
PORTABLE = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DLLAVA_BUILD=OFF"

# the fake venv's python: logs "CMAKE_ARGS|args"; the build check answers from a list of exit codes
FAKE_PYTHON = """#!/bin/sh
echo "$CMAKE_ARGS|$*" >> "$FAKE_LOG"
case "$*" in
  *importlib.metadata*) [ -n "$FAKE_INSTALLED" ] && echo "$FAKE_INSTALLED" && exit 0; exit 1 ;;
  *knowtree.llm.adapters.llama_build*)
    code=$(head -n 1 "$FAKE_CHECKS"); sed -i 1d "$FAKE_CHECKS"; exit "$code" ;;
esac
exit 0
"""


def _run(tmp_path: Path, checks: list[int], installed: str = "", cmake: str | None = None) -> tuple[int, list[str], str]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    python = venv / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    log = tmp_path / "log"
    log.write_text("")
    (tmp_path / "checks").write_text("".join(f"{c}\n" for c in checks))
    env = {k: v for k, v in os.environ.items() if k != "CMAKE_ARGS"}
    env.update(KT_VENV=str(venv), FAKE_LOG=str(log), FAKE_CHECKS=str(tmp_path / "checks"), FAKE_INSTALLED=installed)
    if cmake is not None:
        env["CMAKE_ARGS"] = cmake
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    return done.returncode, log.read_text().splitlines(), done.stderr


def _pip(lines: list[str]) -> list[str]:
    return [line for line in lines if "-m pip install" in line and "--upgrade pip" not in line]


def test_a_fresh_install_builds_llama_cpp_portable_then_knowtree(tmp_path: Path) -> None:
    code, lines, err = _run(tmp_path, [0])
    assert code == 0, err
    pip = _pip(lines)
    assert pip[0] == f"{PORTABLE}|-m pip install -q llama-cpp-python[server]==0.3.36"
    assert pip[1].endswith('-m pip install -q -e .[all,dev]') and len(pip) == 2


def test_a_second_run_does_not_rebuild_and_is_quiet(tmp_path: Path) -> None:
    code, lines, err = _run(tmp_path, [0], installed="0.3.36")
    assert code == 0 and err == ""
    assert not any("llama-cpp-python" in line for line in _pip(lines))


def test_a_native_wheel_from_the_cache_is_rebuilt_portable_without_the_cache(tmp_path: Path) -> None:
    code, lines, err = _run(tmp_path, [2, 0], installed="0.3.36")
    assert code == 0, err
    assert _pip(lines)[-1] == (
        f"{PORTABLE}|-m pip install -q --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36"
    )
    assert "native build" in err


def test_a_build_still_native_after_the_rebuild_fails_loudly(tmp_path: Path) -> None:
    code, _, err = _run(tmp_path, [2, 2], installed="0.3.36")
    assert code == 1 and "still not a portable build" in err


@pytest.mark.parametrize("checks", [[2], [0]])
def test_the_users_cmake_args_are_respected(tmp_path: Path, checks: list[int]) -> None:
    code, lines, _ = _run(tmp_path, checks, cmake="-DGGML_NATIVE=ON")
    assert code == 0
    assert _pip(lines)[0].startswith("-DGGML_NATIVE=ON|") and "--force-reinstall" not in " ".join(lines)
