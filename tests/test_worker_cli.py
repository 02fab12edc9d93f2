"""`knowtree worker` beside `knowtree serve --no-worker`: the replica queues, a worker runs; kill -9 of
the worker holding a job: the other worker finishes it within lease + 10 s, with no model call made
twice and no row doubled; SIGTERM hands a running job back to the queue at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from knowtree.store import SQLiteStore
from server_helpers import free_port, serve_cli, stop, wait_done

HERE = Path(__file__).resolve().parent
LEASE = 2.0


def _corpus(tmp_path: Path, docs: int) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(docs):
        (corpus / f"d{i}.md").write_text(f"# Doc {i}\n\n" + f"Paragraph {i} about topic {i}. " * 60)
    return corpus


def _worker(tmp_path: Path, name: str, *args: str, model: str = "slow:0.5") -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("KNOWTREE_MODEL", None)
    log = open(tmp_path / f"worker-{name}.log", "ab")  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-c", "from knowtree.cli.app import main; main()", "worker", "--db",
         str(tmp_path / "kb.db"), "--model", model, "--job-lease", str(LEASE), "--poll", "0.1", *args],
        env=env, stdout=log, stderr=log, cwd=tmp_path,
    )


def _row(tmp_path: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple]:
    store = SQLiteStore(tmp_path / "kb.db")
    try:
        return store.query(sql, args)
    finally:
        store.close()


def _until(cond: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_a_killed_worker_s_job_is_finished_by_the_other_worker(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, 20)
    port = free_port()
    api = serve_cli(tmp_path, port, "--no-worker", model="slow:0.5")
    workers = {name: _worker(tmp_path, name) for name in ("a", "b")}
    base = f"http://127.0.0.1:{port}"
    try:
        assert httpx.get(f"{base}/v1/health").json()["jobs_worker"] is False
        job = httpx.post(f"{base}/v1/trees/two/build", json={"paths": [str(corpus)]}).json()
        # the worker holding the job, once some of its model calls are done (and cached)
        def holder_once_calls_done() -> str | None:
            owner, progress = _row(tmp_path, "SELECT owner, progress_json FROM jobs WHERE id = ?", (job["id"],))[0]
            return owner if owner and json.loads(progress).get("done", 0) >= 4 else None

        owner = _until(holder_once_calls_done, 120)
        pid = int(owner.split("|")[2])
        holder = next(n for n, p in workers.items() if p.pid == pid)
        finished_before = _row(tmp_path, "SELECT COUNT(*) FROM llm_calls WHERE cached = 0")[0][0]
        assert finished_before >= 4
        workers[holder].send_signal(signal.SIGKILL)
        workers[holder].wait(10)
        killed = time.monotonic()
        done = wait_done(base, job["id"], timeout=LEASE + 10)
        took = time.monotonic() - killed
    finally:
        stop(api, *workers.values())
    assert done["state"] == "done" and done["attempts"] == 2, done
    assert took <= LEASE + 10
    repeated = _row(tmp_path, "SELECT key, SUM(1 - cached) FROM llm_calls GROUP BY key HAVING SUM(1 - cached) > 1")
    cached = _row(tmp_path, "SELECT COUNT(*) FROM llm_calls WHERE cached = 1")[0][0]
    docs = _row(tmp_path, "SELECT COUNT(*), COUNT(DISTINCT path) FROM documents WHERE tree = 'two'")[0]
    nodes = _row(tmp_path, "SELECT COUNT(*), COUNT(DISTINCT id) FROM nodes WHERE tree = 'two'")[0]
    assert repeated == []  # 0 repeated model calls: the takeover's calls for finished work were cache hits
    assert cached >= finished_before
    assert docs == (20, 20) and nodes[0] == nodes[1] > 20  # 0 duplicated rows


def test_sigterm_hands_the_running_job_back_and_another_worker_runs_it(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, 12)
    port = free_port()
    api = serve_cli(tmp_path, port, "--no-worker", model="slow:0.5")
    first = _worker(tmp_path, "first", "--job-lease", "600")  # a lease no takeover would wait out
    second = None
    base = f"http://127.0.0.1:{port}"
    try:
        job = httpx.post(f"{base}/v1/trees/t/build", json={"paths": [str(corpus)]}).json()
        _until(lambda: httpx.get(f"{base}/v1/jobs/{job['id']}").json()["progress"].get("done"), 120)
        first.send_signal(signal.SIGTERM)
        assert first.wait(40) == 0
        back = httpx.get(f"{base}/v1/jobs/{job['id']}").json()
        assert back["state"] == "queued", back  # handed back, not left under a 600 s lease
        second = _worker(tmp_path, "second")
        done = wait_done(base, job["id"], timeout=120)
    finally:
        stop(api, first, *([second] if second else []))
    assert done["state"] == "done" and done["attempts"] == 2
