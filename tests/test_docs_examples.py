"""Every shell and Python example in README.md and docs/ runs, so an example that stops working fails CI.

One test per page: its `bash` / `python` blocks run in order in a fresh folder (a later block sees the
files and database an earlier one made), with `KNOWTREE_MODEL=keyword`. An HTML comment on the line
before a block changes that (docs/development.md):

    <!-- docs-test: embedded -->           needs the real model: runs in the `embedded` group instead
    <!-- docs-test: skip: REASON -->       cannot run here (an install, the suite itself, outside data)
    <!-- docs-test: background port=N -->  a server: started in the background, waited for, stopped
    <!-- docs-test: installed -->          the install line: runs without `bash scripts/install.sh && `
                                           and with this environment's `knowtree` for `.venv/bin/knowtree`
    <!-- docs-test: setup                  hidden shell lines run first (the block's input files)
    ... -->
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN_LANGS = {"bash", "sh", "shell", "python", "py"}
BLOCK = re.compile(
    r"(?:<!--\s*docs-test:(?P<marker>.*?)-->\s*\n)?^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```\s*$",
    re.S | re.M,
)


@dataclass
class Block:
    page: str
    line: int
    lang: str
    body: str
    marker: str = ""
    setup: str = ""
    kind: str = field(init=False)

    def __post_init__(self) -> None:
        m = self.marker.strip()
        if m.startswith("setup"):
            self.setup, self.kind = m.removeprefix("setup").strip(), "run"
        elif m.startswith("skip"):
            if not m.removeprefix("skip").strip(": "):
                raise AssertionError(f"{self.page}:{self.line}: docs-test skip without a reason")
            self.kind = "skip"
        elif m.startswith("installed"):
            self.body = self.body.replace("bash scripts/install.sh && ", "").replace(".venv/bin/", "")
            self.kind = "run"
        elif m.startswith(("embedded", "background")):
            self.kind = m.split()[0]
        elif m:
            raise AssertionError(f"{self.page}:{self.line}: unknown docs-test marker {m!r}")
        else:
            self.kind = "run"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for m in BLOCK.finditer(text):
        lang = m["lang"].lower()
        if lang not in RUN_LANGS:
            continue
        line = text.count("\n", 0, m.start("lang")) + 1
        found.append(Block(str(page.relative_to(ROOT)), line, lang, m["body"], m["marker"] or ""))
    return found


def _pages(kind: str) -> list[Path]:
    return [p for p in PAGES if any(b.kind == kind or (kind == "run" and b.kind == "background") for b in blocks(p))]


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env.update(
        PATH=bin_dir + os.pathsep + env.get("PATH", ""),
        KT_REPO=str(ROOT),
        HOME=str(tmp / "home"),
        XDG_CONFIG_HOME=str(tmp / "home" / ".config"),
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p),
    )
    # the embedded model's cache stays where it is (a test must not assemble it again)
    env.setdefault("XDG_CACHE_HOME", str(Path.home() / ".cache"))
    (tmp / "home").mkdir(exist_ok=True)
    return env


def _shell(script: str, cwd: Path, env: dict[str, str], where: str, timeout: float = 120) -> None:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        pytest.fail(f"{where} failed (exit {done.returncode}):\n{script}\n--- stdout\n{done.stdout[-3000:]}"
                    f"\n--- stderr\n{done.stderr[-3000:]}")


def _wait_port(port: int, proc: subprocess.Popen[bytes], where: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{where}: the background command exited ({proc.returncode}) before port {port} opened")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.2)
    pytest.fail(f"{where}: port {port} did not open in {timeout:.0f}s")


def run_page(page: Path, tmp: Path, kinds: set[str]) -> int:
    env = _env(tmp)
    env["KNOWTREE_MODEL"] = "keyword" if "embedded" not in kinds else env.get("KNOWTREE_MODEL", "local")
    background: list[subprocess.Popen[bytes]] = []
    ran = 0
    try:
        for block in blocks(page):
            where = f"{block.page}:{block.line}"
            if block.kind not in kinds:
                continue
            if block.setup:
                _shell(block.setup, tmp, env, f"{where} (setup)")
            if block.lang in ("python", "py"):
                script = tmp / f"_example_{block.line}.py"
                script.write_text(block.body, encoding="utf-8")
                done = subprocess.run([sys.executable, script.name], cwd=tmp, env=env, capture_output=True,
                                      text=True, timeout=180)
                if done.returncode != 0:
                    pytest.fail(f"{where} failed:\n{block.body}\n--- stderr\n{done.stderr[-3000:]}")
            elif block.kind == "background":
                port = int(re.search(r"port=(\d+)", block.marker)[1])  # type: ignore[index]
                proc = subprocess.Popen(["bash", "-c", block.body], cwd=tmp, env=env, start_new_session=True,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                background.append(proc)
                _wait_port(port, proc, where)
            else:
                _shell(block.body, tmp, env, where)
            ran += 1
    finally:
        for proc in background:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return ran


@pytest.mark.parametrize("page", _pages("run"), ids=lambda p: str(p.relative_to(ROOT)))
def test_example_runs(page: Path, tmp_path: Path) -> None:
    assert run_page(page, tmp_path, {"run", "background"}) > 0


@pytest.mark.embedded
@pytest.mark.skipif(os.environ.get("KNOWTREE_SKIP_EMBEDDED") == "1", reason="KNOWTREE_SKIP_EMBEDDED=1")
@pytest.mark.parametrize("page", _pages("embedded"), ids=lambda p: str(p.relative_to(ROOT)))
def test_example_runs_with_the_embedded_model(page: Path, tmp_path: Path) -> None:
    assert run_page(page, tmp_path, {"embedded"}) > 0


def test_markers_are_known_and_blocks_found() -> None:
    """Every marker parses (an unknown one or a skip without a reason fails here), and the collector
    finds the README's two commands, so a change of fence style cannot silently run nothing."""
    readme = blocks(ROOT / "README.md")
    bodies = [b.body for b in readme]
    assert any("knowtree sample lighthouse" in b for b in bodies)
    assert any("pytest -q" in b for b in bodies)
    assert sum(len(blocks(p)) for p in PAGES) >= 20


def test_a_failing_example_fails(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```bash\nknowtree ask no-such-tree 'x'\n```\n", encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    global ROOT
    saved = ROOT
    ROOT = tmp_path
    try:
        with pytest.raises(pytest.fail.Exception):
            run_page(page, work, {"run"})
    finally:
        ROOT = saved

