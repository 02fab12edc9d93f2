"""How the installed llama.cpp was built, checked against this machine's CPU.

`llama_cpp.llama_print_system_info()` names the CPU features compiled in ("AVX2 = 1 | ... | AMX_INT8 = 1").
A feature this CPU lacks means the first model call dies with SIGILL; AMX or AVX-512 compiled in means
a native build (`-DGGML_NATIVE=ON`, pip's default, possibly a wheel pip's cache kept from another
build) rather than the portable one, and the native AMX code path is known to crash (SIGSEGV) on
Sapphire Rapids. The system info is read in a subprocess: a bad build can crash while loading.

    python -m knowtree.llm.adapters.llama_build [--json]   # exit 0 portable, 2 unsafe, 1 unreadable
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

LLAMA_CPP_VERSION = "0.3.36"

#: x86-64-v3 without AVX-512 or AMX: safe on every x86-64 CPU since Haswell (2013) / Zen 1
PORTABLE_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
    "-DGGML_AVX512=OFF -DLLAVA_BUILD=OFF"
)
REINSTALL = (
    f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" pip install --no-cache-dir --force-reinstall --no-deps '
    f"llama-cpp-python=={LLAMA_CPP_VERSION}"
)
#: what the portable build needs of the CPU
PORTABLE_NEEDS = ("AVX", "AVX2", "FMA", "F16C")

#: llama.cpp's feature name → the /proc/cpuinfo flag that says the CPU has it
CPU_FLAG = {
    "SSE3": "pni",
    "SSSE3": "ssse3",
    "AVX": "avx",
    "AVX2": "avx2",
    "AVX_VNNI": "avx_vnni",
    "F16C": "f16c",
    "FMA": "fma",
    "BMI2": "bmi2",
    "AVX512": "avx512f",
    "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16",
    "AMX_INT8": "amx_int8",
    "AMX_TILE": "amx_tile",
    "AMX_BF16": "amx_bf16",
}
#: shown by `knowtree doctor`
REPORTED_FLAGS = ("avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512_vnni", "amx_tile", "amx_int8")

_HINTS = {
    "SIGILL": "llama.cpp was compiled for CPU features this CPU lacks",
    "SIGKILL": "killed, e.g. by kill -9 or the out-of-memory killer",
    "SIGSEGV": "a crash inside llama.cpp",
    "SIGBUS": "a crash inside llama.cpp",
    "SIGABRT": "llama.cpp aborted",
}

_NOT_INSTALLED = 'llama-cpp-python is not installed: pip install "knowtree[local]"'

_PROBE = (
    "import json, llama_cpp\n"
    "info = llama_cpp.llama_print_system_info()\n"
    "info = info.decode('utf-8', 'replace') if isinstance(info, bytes) else str(info)\n"
    "print(json.dumps({'version': llama_cpp.__version__, 'system_info': info}))\n"
)


def exit_cause(returncode: int | None) -> str:
    """`-11` → "SIGSEGV: a crash inside llama.cpp"; `1` → "exit code 1"."""
    if returncode is None:
        return "closed its pipe"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = _HINTS.get(name)
        return f"{name}: {hint}" if hint else name
    return f"exit code {returncode}"


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    """The first CPU's flags, or None where /proc/cpuinfo says nothing (not Linux x86)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    return set(match.group(1).split()) if match else None


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "unknown"
    match = re.search(r"^model name\s*:\s*(.*)$", text, re.MULTILINE)
    return match.group(1).strip() if match else "unknown"


def parse_system_info(info: str) -> set[str]:
    """The CPU features compiled in: {"AVX2", "FMA", ...} from "AVX2 = 1 | FMA = 1 | AVX512 = 0"."""
    return {name for name, value in re.findall(r"([A-Z][A-Z0-9_]*)\s*=\s*(\d+)", info) if value != "0"}


def missing_features(compiled: set[str], flags: set[str]) -> list[str]:
    """Compiled CPU features this CPU does not have (each one a SIGILL waiting to happen)."""
    return sorted(f for f in compiled if f in CPU_FLAG and CPU_FLAG[f] not in flags)


def native_features(compiled: set[str]) -> list[str]:
    """AVX-512 and AMX features: the portable build has none; a native build on such a CPU has them."""
    return sorted(f for f in compiled if f.startswith(("AVX512", "AMX")))


def fatal_problems(compiled: set[str], flags: set[str] | None = None) -> list[str]:
    """One line per reason this build will crash on this CPU (features it lacks); [] when unknown."""
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return []
    problems: list[str] = []
    lacking = [f for f in PORTABLE_NEEDS if CPU_FLAG[f] not in flags]
    missing = missing_features(compiled, flags)
    if missing:
        problems.append(
            f"llama.cpp was compiled with {', '.join(missing)}, which this CPU lacks: it will crash (SIGILL); "
            f"reinstall portable with: {REINSTALL}"
            if not lacking
            else f"this CPU lacks {', '.join(lacking)}, which llama.cpp was compiled with (it will crash, "
            "SIGILL), and the portable build needs them too (x86-64-v3: Haswell/Zen or later); build for "
            'this CPU with: CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF" pip install --no-cache-dir '
            f"--force-reinstall --no-deps llama-cpp-python=={LLAMA_CPP_VERSION}"
        )
    return problems


@dataclass
class BuildReport:
    """`inspect()`'s verdict: `errors` make the model unusable or crash-prone, `warnings` do not."""

    python: str
    version: str | None = None
    system_info: str = ""
    compiled: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def native(self) -> bool:
        return bool(native_features(set(self.compiled)))

    @property
    def ok(self) -> bool:
        return not self.errors


def read_system_info(python: str = sys.executable, timeout: float = 120.0) -> tuple[str | None, str]:
    """(version, system info) of llama_cpp as `python` imports it, read in a subprocess.
    Raises RuntimeError with one line when it cannot be read (not installed, crashed, hung)."""
    try:
        done = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"importing llama_cpp did not finish in {timeout:.0f} s") from None
    except OSError as exc:
        raise RuntimeError(f"cannot run {python}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1]
        if "No module named 'llama_cpp'" in done.stderr:
            raise RuntimeError(_NOT_INSTALLED)
        raise RuntimeError(f"importing llama_cpp failed ({exit_cause(done.returncode)}) {last}".strip())
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return data.get("version"), str(data.get("system_info", ""))


_GENERATE = (
    "import json, sys, time, llama_cpp\n"
    "llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, verbose=False)\n"
    "start = time.monotonic()\n"
    "out = llm.create_completion('Say hi.', max_tokens=1, temperature=0.0)\n"
    "print(json.dumps({'text': out['choices'][0]['text'], 'seconds': time.monotonic() - start}))\n"
)


def generate_one(model: Path, python: str = sys.executable, timeout: float = 180.0) -> tuple[str, float]:
    """Load `model` and generate one token in a subprocess: (the token, seconds). RuntimeError with one
    line naming the cause (a crash's signal, a timeout) otherwise."""
    try:
        done = subprocess.run(
            [python, "-c", _GENERATE, str(model)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"no token within {timeout:.0f} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1]
        raise RuntimeError(f"the model process failed ({exit_cause(done.returncode)}) {last}".strip())
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return str(data["text"]), float(data["seconds"])


def inspect(python: str = sys.executable, flags: set[str] | None = None) -> BuildReport:
    """How `python`'s llama.cpp was built, and what that means on this CPU."""
    report = BuildReport(python=python)
    try:
        report.version, report.system_info = read_system_info(python)
    except RuntimeError as exc:
        report.errors.append(str(exc))
        return report
    compiled = parse_system_info(report.system_info)
    report.compiled = sorted(compiled)
    flags = cpu_flags() if flags is None else flags
    report.errors += fatal_problems(compiled, flags if flags is not None else set(CPU_FLAG.values()))
    amx = [f for f in native_features(compiled) if f.startswith("AMX")]
    native = native_features(compiled)
    if not report.errors and amx:
        report.errors.append(
            f"llama.cpp is a native build with {', '.join(amx)} (possibly from pip's wheel cache): its AMX "
            f"path crashes (SIGSEGV) on some CPUs; reinstall portable with: {REINSTALL}"
        )
    elif not report.errors and native:
        report.warnings.append(
            f"llama.cpp is a native build with {', '.join(native)} (possibly from pip's wheel cache): it "
            f"crashes on a CPU without them; for an install that runs anywhere: {REINSTALL}"
        )
    if report.version and report.version != LLAMA_CPP_VERSION:
        report.warnings.append(
            f"llama-cpp-python {report.version} is installed; knowtree pins {LLAMA_CPP_VERSION}"
        )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m knowtree.llm.adapters.llama_build")
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose llama_cpp to check")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = inspect(args.python)
    if args.json:
        print(json.dumps({**asdict(report), "native": report.native, "ok": report.ok}))
    else:
        for line in report.errors:
            print(f"error: {line}", file=sys.stderr)
        for line in report.warnings:
            print(f"warning: {line}", file=sys.stderr)
    if report.errors == [_NOT_INSTALLED]:
        return 1
    return 2 if (report.errors or report.native) else 0


if __name__ == "__main__":
    sys.exit(main())
