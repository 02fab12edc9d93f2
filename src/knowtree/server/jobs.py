"""Background build jobs: stored in the database, run by one worker thread in the server process.

A job is `queued` → `running` → `done` | `failed` | `cancelled`. Its progress (stage, done, total)
and final report are written to its row, so any number of SSE listeners (and a restarted server)
read the same state. A job still `running` when the server starts belonged to a server that died:
it is queued again and re-run; the model-call cache answers every call the dead run finished, and a
tree is saved in one transaction at the end of a build, so no half-written tree is ever visible.
Cancelling sets a flag the build's progress hook checks; the build stops at its next step.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from knowtree.store import SQLiteStore

log = logging.getLogger("knowtree.server.jobs")

FINAL = ("done", "failed", "cancelled")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class JobCancelled(Exception):
    """Raised inside a running job's progress hook once a cancel was requested."""


@dataclass
class Job:
    id: str
    tenant: str
    kind: str
    tree: str  # the stored tree name
    params: dict[str, Any]
    state: str
    progress: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] | None = None
    error: str | None = None
    cancel_requested: bool = False
    attempts: int = 0
    created: str = ""
    updated: str = ""


_COLUMNS = (
    "id, tenant, kind, tree, params_json, state, progress_json, report_json, error, cancel_requested,"
    " attempts, created, updated"
)


def _job(r: tuple) -> Job:
    return Job(
        id=r[0],
        tenant=r[1],
        kind=r[2],
        tree=r[3],
        params=json.loads(r[4]),
        state=r[5],
        progress=json.loads(r[6]),
        report=json.loads(r[7]) if r[7] else None,
        error=r[8],
        cancel_requested=bool(r[9]),
        attempts=r[10],
        created=r[11],
        updated=r[12],
    )


class JobStore:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    def create(self, tenant: str, kind: str, tree: str, params: dict[str, Any]) -> Job:
        job_id = uuid.uuid4().hex[:16]
        now = _now()
        with self.store.transaction() as c:
            c.execute(
                f"INSERT INTO jobs({_COLUMNS}) VALUES (?, ?, ?, ?, ?, 'queued', '{{}}', NULL, NULL, 0, 0, ?, ?)",
                (job_id, tenant, kind, tree, json.dumps(params), now, now),
            )
        job = self.get(job_id)
        assert job is not None
        return job

    def get(self, job_id: str) -> Job | None:
        rows = self.store.query(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    def list(self, tenant: str | None, limit: int = 50) -> list[Job]:
        sql = f"SELECT {_COLUMNS} FROM jobs"
        args: tuple[object, ...] = ()
        if tenant is not None:
            sql += " WHERE tenant = ?"
            args = (tenant,)
        rows = self.store.query(sql + " ORDER BY created DESC, id LIMIT ?", (*args, limit))
        return [_job(r) for r in rows]

    def unfinished_uploads(self) -> set[str]:
        """The upload folders of the jobs still queued or running."""
        rows = self.store.query("SELECT params_json FROM jobs WHERE state IN ('queued', 'running')")
        return {str(p["uploads"]) for (raw,) in rows if (p := json.loads(raw)).get("uploads")}

    def claim_next(self) -> Job | None:
        """Mark the oldest queued job running and return it (None when the queue is empty)."""
        with self.store.transaction() as c:
            row = c.execute(
                "SELECT id FROM jobs WHERE state = 'queued' ORDER BY created, id LIMIT 1"
            ).fetchone()
            if row is None:
                return None
            c.execute(
                "UPDATE jobs SET state = 'running', attempts = attempts + 1, updated = ? WHERE id = ?",
                (_now(), row[0]),
            )
        return self.get(row[0])

    def requeue_orphans(self) -> int:
        """Jobs left `running` by a server that died are queued again (their builds resume)."""
        with self.store.transaction() as c:
            return c.execute(
                "UPDATE jobs SET state = 'queued', updated = ? WHERE state = 'running'", (_now(),)
            ).rowcount

    def set_progress(self, job_id: str, progress: dict[str, Any]) -> bool:
        """Record progress; returns whether a cancel was requested."""
        with self.store.transaction() as c:
            c.execute(
                "UPDATE jobs SET progress_json = ?, updated = ? WHERE id = ?",
                (json.dumps(progress), _now(), job_id),
            )
            row = c.execute("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return bool(row and row[0])

    def finish(self, job_id: str, state: str, *, report: dict[str, Any] | None = None, error: str | None = None) -> None:
        with self.store.transaction() as c:
            c.execute(
                "UPDATE jobs SET state = ?, report_json = ?, error = ?, updated = ? WHERE id = ?",
                (state, json.dumps(report) if report is not None else None, error, _now(), job_id),
            )

    def request_cancel(self, job_id: str) -> Job | None:
        """Cancel a job: a queued one at once, a running one at its next progress step."""
        with self.store.transaction() as c:
            c.execute(
                "UPDATE jobs SET state = 'cancelled', cancel_requested = 1, updated = ? WHERE id = ? AND state = 'queued'",
                (_now(), job_id),
            )
            c.execute(
                "UPDATE jobs SET cancel_requested = 1, updated = ? WHERE id = ? AND state = 'running'",
                (_now(), job_id),
            )
        return self.get(job_id)


Runner = Callable[[Job, Callable[[dict[str, Any]], None]], dict[str, Any]]


class JobWorker:
    """One background thread running queued jobs one at a time with `runner(job, report_progress)`."""

    def __init__(self, jobs: JobStore, runner: Runner, *, poll_seconds: float = 0.5,
                 on_end: Callable[[Job], None] | None = None) -> None:
        self.jobs = jobs
        self.runner = runner
        self.on_end = on_end  # called once a job is done, failed or cancelled (its uploads go)
        self.poll_seconds = poll_seconds
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Start the worker; returns how many jobs of a dead server were queued again."""
        resumed = self.jobs.requeue_orphans()
        self._thread = threading.Thread(target=self._loop, name="knowtree-jobs", daemon=True)
        self._thread.start()
        return resumed

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            job = self.jobs.claim_next()
            if job is None:
                self._wake.wait(self.poll_seconds)
                self._wake.clear()
                continue
            self.run_one(job)

    def run_one(self, job: Job) -> None:
        last = [0.0]

        def report_progress(progress: dict[str, Any]) -> None:
            now = time.monotonic()
            final = progress.get("done") == progress.get("total")
            if now - last[0] < 0.2 and not final:  # throttle writes; the cancel flag is still read
                cancelled = bool(self.jobs.store.query(
                    "SELECT cancel_requested FROM jobs WHERE id = ?", (job.id,)
                )[0][0])
            else:
                last[0] = now
                cancelled = self.jobs.set_progress(job.id, progress)
            if cancelled or self._stop.is_set():
                raise JobCancelled(job.id)

        try:
            report = self.runner(job, report_progress)
        except JobCancelled:
            if self._stop.is_set() and not self._cancel_requested(job.id):
                return  # server shutting down: the job stays `running` and resumes on the next start
            self.jobs.finish(job.id, "cancelled", error="cancelled on request")
        except Exception as exc:  # a job's failure is recorded on the job, never crashes the worker
            log.info("job %s failed: %s", job.id, exc)
            self.jobs.finish(job.id, "failed", error=_describe(exc))
        else:
            self.jobs.finish(job.id, "done", report=report)
        if self.on_end is not None:
            try:
                self.on_end(job)
            except Exception:  # cleaning up after a job never stops the worker
                log.exception("ending job %s", job.id)

    def _cancel_requested(self, job_id: str) -> bool:
        job = self.jobs.get(job_id)
        return bool(job and job.cancel_requested)


def _describe(exc: Exception) -> str:
    from knowtree.errors import KnowtreeError

    if isinstance(exc, KnowtreeError):
        return str(exc)
    return f"internal error ({type(exc).__name__})"
