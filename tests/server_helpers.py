"""Shared by the server tests: an in-process app over a KeywordModel database, and small helpers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

import knowtree
from knowtree.testing.models import KeywordModel

HERE = Path(__file__).parent

CHAT = [
    {"role": "user", "name": "Ann", "content": "I moved to Lisbon last spring for a new job.", "timestamp": "2024-03-01T10:00"},
    {"role": "assistant", "content": "Congratulations on the move to Lisbon!", "timestamp": "2024-03-01T10:01"},
    {"role": "user", "name": "Ann", "content": "My sister Maria adopted a cat called Pixel.", "timestamp": "2024-03-02T09:00"},
    {"role": "assistant", "content": "Pixel is a lovely name for a cat.", "timestamp": "2024-03-02T09:01"},
]


def make_app(tmp_path: Path, model: Any = None, **config: Any) -> Any:
    from knowtree.server.app import create_app
    from knowtree.server.config import ServerConfig

    kt = knowtree.open(tmp_path / "kb.db", model=model or KeywordModel())
    config.setdefault("allowed_roots", [tmp_path])
    config.setdefault("trusted_hosts", ["127.0.0.1", "localhost", "::1", "testserver"])  # TestClient's host
    return create_app(kt, ServerConfig(**config))


def wait_job(client: Any, job_id: str, headers: dict[str, str] | None = None, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}", headers=headers or {}).json()
        if job["state"] in ("done", "failed", "cancelled"):
            return job  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def build(client: Any, tree: str, paths: list[str], headers: dict[str, str] | None = None) -> dict[str, Any]:
    r = client.post(f"/v1/trees/{tree}/build", json={"paths": paths}, headers=headers or {})
    assert r.status_code == 202, r.text
    job = wait_job(client, r.json()["id"], headers)
    assert job["state"] == "done", job
    return job


def sse_events(text: str) -> list[tuple[str, Any]]:
    out = []
    for block in text.strip().split("\n\n"):
        event, data = "message", ""
        for line in block.splitlines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data += line[6:]
        out.append((event, json.loads(data) if data else None))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(tmp_path: Path, port: int, delay: float = 0.25) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "server_slow_app.py"), str(tmp_path / "kb.db"), str(port), str(tmp_path),
         str(tmp_path / "calls.log"), str(delay)],
        env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.err", "ab"),  # noqa: SIM115
    )
    return _healthy(proc, port, tmp_path / "server.err")


def _healthy(proc: subprocess.Popen[bytes], port: int, log: Path) -> subprocess.Popen[bytes]:
    """`proc` once it answers /v1/health on `port`. A server that exits fails at once; one still
    starting gets 2 minutes (30 s was not enough for the import on a 2-core machine busy with a model
    job). A failure is raised with the end of the server's `log`."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    code = proc.poll()
    proc.kill()
    proc.wait(10)
    why = "did not answer /v1/health in 120 s" if code is None else f"exited with {code}"
    raise AssertionError(f"server {why}: " + log.read_text()[-2000:])


def serve_cli(tmp_path: Path, port: int, *args: str, model: str = "slow:0.3") -> subprocess.Popen[bytes]:
    """`knowtree serve --db tmp_path/kb.db` of this checkout (its log in tmp_path/serve<port>.log),
    once it answers /v1/health."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("KNOWTREE_MODEL", None)
    log = open(tmp_path / f"serve{port}.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-c", "from knowtree.cli.app import main; main()", "serve", "--port", str(port),
         "--db", str(tmp_path / "kb.db"), "--model", model, "--allow-root", str(tmp_path), *args],
        env=env, stdout=log, stderr=log, cwd=tmp_path,
    )
    return _healthy(proc, port, tmp_path / f"serve{port}.log")


def stop(*procs: subprocess.Popen[bytes]) -> None:
    """SIGTERM each server still running (SIGKILL after 15 s)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


def wait_done(base: str, job_id: str, timeout: float = 180) -> dict[str, Any]:
    """Poll a job over HTTP until it ends."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = httpx.get(f"{base}/v1/jobs/{job_id}", timeout=10).json()
        if job["state"] in ("done", "failed", "cancelled"):
            return job  # type: ignore[no-any-return]
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish: {job}")
