"""A job belongs to one live worker: claimed with an owner and a lease its heartbeat renews; another
worker (thread or process) takes it over only once the lease expired or its owner's process is gone.
Two `knowtree serve` on one database run a job once."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from knowtree.server.jobs import Job, JobStore, JobWorker, new_owner, owner_gone
from knowtree.store import SQLiteStore
from server_helpers import free_port as _port
from server_helpers import serve_cli as serve
from server_helpers import stop, wait_done


def _wait(cond: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


class Recorder:
    """A runner that records each run (job id, worker owner) and takes `seconds`, reporting progress."""

    def __init__(self, seconds: float = 1.0) -> None:
        self.seconds = seconds
        self.runs: list[tuple[str, str]] = []
        self.ended: list[tuple[str, str, str]] = []  # (job, worker, "returned" or the exception's name)
        self.lock = threading.Lock()

    def runner_for(self, name: str) -> Any:
        def run(job: Job, report: Any) -> dict[str, Any]:
            with self.lock:
                self.runs.append((job.id, name))
            steps = 10
            try:
                for i in range(steps):
                    time.sleep(self.seconds / steps)
                    report({"stage": "work", "done": i + 1, "total": steps})
            except BaseException as exc:
                self.ended.append((job.id, name, type(exc).__name__))
                raise
            self.ended.append((job.id, name, "returned"))
            return {"by": name}

        return run


def _stores(tmp_path: Path, lease: float) -> tuple[JobStore, JobStore]:
    """Two job stores on one file, each with its own connection (as two servers have)."""
    a = SQLiteStore(tmp_path / "kb.db")
    b = SQLiteStore(tmp_path / "kb.db")
    return JobStore(a, lease_seconds=lease), JobStore(b, lease_seconds=lease)


def test_two_workers_on_one_database_run_a_job_once(tmp_path: Path) -> None:
    ja, jb = _stores(tmp_path, lease=0.6)  # short: the live owner renews it many times over
    rec = Recorder(seconds=2.0)
    job = ja.create("local", "build", "t", {})
    a = JobWorker(ja, rec.runner_for("a"), poll_seconds=0.05)
    b = JobWorker(jb, rec.runner_for("b"), poll_seconds=0.05)
    a.start()
    try:
        _wait(lambda: ja.get(job.id).state == "running")
        b.start()  # a second server starting while the first runs the job
        _wait(lambda: ja.get(job.id).state == "done")
    finally:
        a.stop()
        b.stop()
    done = ja.get(job.id)
    assert rec.runs == [(job.id, "a")]
    assert done.attempts == 1 and done.report == {"by": "a"} and done.owner is None


def test_many_workers_claim_many_jobs_each_once(tmp_path: Path) -> None:
    ja, jb = _stores(tmp_path, lease=5.0)
    rec = Recorder(seconds=0.1)
    ids = [ja.create("local", "build", f"t{i}", {}).id for i in range(8)]
    workers = [JobWorker(js, rec.runner_for(f"w{i}"), poll_seconds=0.01) for i, js in enumerate([ja, jb, ja, jb])]
    for w in workers:
        w.start()
    try:
        _wait(lambda: all(ja.get(i).state == "done" for i in ids))
    finally:
        for w in workers:
            w.stop()
    assert Counter(j for j, _ in rec.runs) == Counter(ids)  # each once
    assert {ja.get(i).attempts for i in ids} == {1}


def test_a_job_whose_lease_expired_is_taken_over_and_a_live_lease_is_not(tmp_path: Path) -> None:
    ja, jb = _stores(tmp_path, lease=0.8)
    job = ja.create("local", "build", "t", {})
    dead = "another-host|1|42|abcd"  # a worker elsewhere that stopped renewing: only its lease tells
    claimed = ja.claim_next(dead)
    assert claimed is not None and claimed.owner == dead and claimed.attempts == 1
    assert jb.claim_next("me|1|1|x") is None  # its lease still runs
    assert jb.takeovers() == 0
    rec = Recorder(seconds=0.2)
    b = JobWorker(jb, rec.runner_for("b"), poll_seconds=0.05)
    started = time.monotonic()
    b.start()
    try:
        _wait(lambda: jb.get(job.id).state == "done")
    finally:
        b.stop()
    assert time.monotonic() - started >= 0.5  # not before the lease ran out
    done = jb.get(job.id)
    assert rec.runs == [(job.id, "b")] and done.attempts == 2 and done.report == {"by": "b"}


def test_an_owner_that_lost_its_lease_writes_nothing_more(tmp_path: Path) -> None:
    ja, jb = _stores(tmp_path, lease=0.5)
    job = ja.create("local", "build", "t", {})
    rec = Recorder(seconds=3.0)
    a = JobWorker(ja, rec.runner_for("a"), poll_seconds=0.05)
    a.start()
    try:
        _wait(lambda: ja.get(job.id).state == "running" and ja.get(job.id).progress)
        with jb.store.transaction() as c:  # as if another worker took it over (a stall past the lease)
            c.execute("UPDATE jobs SET owner = 'thief|1|1|x', lease_until = ? WHERE id = ?",
                      (time.time() + 60, job.id))
        before = jb.get(job.id).progress
        _wait(lambda: rec.ended, 10)  # its next progress step (or heartbeat) finds the job not its own
        time.sleep(0.5)
    finally:
        a.stop()
    assert rec.ended == [(job.id, "a", "JobLost")]
    after = jb.get(job.id)
    assert after.state == "running" and after.owner == "thief|1|1|x"  # the new owner's, untouched
    assert after.report is None and after.progress == before and after.attempts == 1


def test_a_worker_stopping_hands_its_job_back(tmp_path: Path) -> None:
    ja, jb = _stores(tmp_path, lease=30.0)
    job = ja.create("local", "build", "t", {})
    rec = Recorder(seconds=5.0)
    a = JobWorker(ja, rec.runner_for("a"), poll_seconds=0.05)
    a.start()
    _wait(lambda: ja.get(job.id).progress)
    a.stop()
    back = jb.get(job.id)
    assert back.state == "queued" and back.owner is None  # the next worker need not wait 30 s
    assert jb.claim_next("next|1|1|x") is not None


def test_a_dead_owner_of_this_host_is_taken_over_at_once(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    mine = new_owner()
    host, pidns, _, _ = mine.split("|")
    dead = f"{host}|{pidns}|{proc.pid}|dead"
    assert owner_gone(dead) and not owner_gone(mine)
    assert not owner_gone(f"{host}|other-namespace|{proc.pid}|x")  # another container: not known dead
    ja, jb = _stores(tmp_path, lease=3600.0)
    job = ja.create("local", "build", "t", {})
    assert ja.claim_next(dead).id == job.id
    taken = jb.claim_next(mine)  # its lease has an hour to run, but its process is gone
    assert taken is not None and taken.owner == mine and taken.attempts == 2


def test_a_job_cancelled_while_its_owner_died_is_not_run_again(tmp_path: Path) -> None:
    ja, jb = _stores(tmp_path, lease=30.0)
    job = ja.create("local", "build", "t", {})
    JobStore(ja.store, lease_seconds=-1).claim_next("gone-host|1|7|x")  # its lease already ran out
    assert ja.request_cancel(job.id).state == "running"  # a running job stops at its next step...
    assert jb.claim_next("me|1|1|x") is None  # ...but its worker is gone: cancelled, not run
    assert jb.get(job.id).state == "cancelled" and jb.get(job.id).attempts == 1


# -- two real servers ------------------------------------------------------------------------------
SLOW = "slow:2"  # seconds per model call: 20 documents outlast a second server's start (4 calls at once)


def _corpus(tmp_path: Path, docs: int) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(docs):
        (corpus / f"d{i}.md").write_text(f"# Doc {i}\n\n" + f"Paragraph {i} about topic {i}. " * 60)
    return corpus


def test_two_servers_on_one_database_run_a_build_once(tmp_path: Path) -> None:
    """trust.sh item 5: a second `serve` started on the file while the first builds."""
    corpus = _corpus(tmp_path, 20)
    pa, pb = _port(), _port()
    a = serve(tmp_path, pa, "--job-lease", "2", model=SLOW)
    b = None
    try:
        job = httpx.post(f"http://127.0.0.1:{pa}/v1/trees/two/build", json={"paths": [str(corpus)]}).json()
        _wait(lambda: httpx.get(f"http://127.0.0.1:{pa}/v1/jobs/{job['id']}").json()["state"] == "running")
        b = serve(tmp_path, pb, "--job-lease", "2", model=SLOW)
        seen_from_b = httpx.get(f"http://127.0.0.1:{pb}/v1/jobs/{job['id']}").json()  # any server reads it
        assert seen_from_b["state"] == "running" and seen_from_b["attempts"] == 1
        done = wait_done(f"http://127.0.0.1:{pb}", job["id"])
    finally:
        stop(*(p for p in (a, b) if p is not None))
    assert done["state"] == "done" and done["attempts"] == 1, done
    store = SQLiteStore(tmp_path / "kb.db")
    try:
        builds = store.query("SELECT COUNT(*) FROM runs WHERE kind = 'build'")[0][0]
    finally:
        store.close()
    assert builds == 1  # one build run in the ledger


def test_a_killed_servers_build_is_taken_over_by_the_other_server(tmp_path: Path) -> None:
    """kill -9 of the server running a build: the other server on the file takes the job over and
    finishes it; no model call finished before the kill is made again, no row is doubled."""
    corpus = _corpus(tmp_path, 20)
    pa, pb = _port(), _port()
    a = serve(tmp_path, pa, "--job-lease", "2", model=SLOW)
    b = None
    try:
        job = httpx.post(f"http://127.0.0.1:{pa}/v1/trees/two/build", json={"paths": [str(corpus)]}).json()
        b = serve(tmp_path, pb, "--job-lease", "2", model=SLOW)
        base_b = f"http://127.0.0.1:{pb}"
        running = httpx.get(f"{base_b}/v1/jobs/{job['id']}").json()
        assert running["state"] == "running" and running["attempts"] == 1, running
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        done = wait_done(f"http://127.0.0.1:{pb}", job["id"])
    finally:
        stop(*(p for p in (a, b) if p is not None))
    assert done["state"] == "done" and done["attempts"] == 2, done
    store = SQLiteStore(tmp_path / "kb.db")
    try:
        repeated = store.query(
            "SELECT key, SUM(1 - cached) FROM llm_calls GROUP BY key HAVING SUM(1 - cached) > 1"
        )
        docs = store.query("SELECT COUNT(*), COUNT(DISTINCT path) FROM documents WHERE tree = 'two'")[0]
        nodes = store.query("SELECT COUNT(*), COUNT(DISTINCT id) FROM nodes WHERE tree = 'two'")[0]
        statuses = sorted(str(r["status"]) for r in store.runs("two", 10) if r["kind"] == "build")
    finally:
        store.close()
    assert repeated == []  # the model-call cache answered what the killed run had finished
    assert docs == (20, 20) and nodes[0] == nodes[1] > 20
    assert statuses == ["interrupted", "ok"]  # the killed run, and the one that finished it
