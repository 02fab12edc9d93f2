"""Background build jobs: stored in the database, run by one worker thread per server process.

A job is `queued` → `running` → `done` | `failed` | `cancelled`. Its progress (stage, done, total)
and final report are written to its row, so any number of SSE listeners, on any server using the
same database file, read the same state.

A job belongs to one live worker. Claiming it (`JobStore.claim_next`, the one place that decides
who runs what) sets its `owner` and a lease (`lease_until`, seconds since the epoch) in one
conditional write; while the job runs, a heartbeat thread renews the lease. Another process takes a
`running` job over only when its lease has expired (its owner died or hung), or at once when its
owner is a process of this host and PID namespace that no longer exists (a killed server restarted
on the same machine). Taking over counts as another attempt; the model-call cache answers every call
the dead run finished, and a tree is saved in one transaction at the end of a build, so no
half-written tree is ever visible. An owner that finds its lease gone (renewal or progress write
matches no row) stops: it writes no progress and no result. A server that stops gracefully puts its
running job back in the queue for the next worker. Cancelling sets a flag the build's progress hook
checks; the build stops at its next step.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from knowtree.store import SQLStore
from knowtree.store import jobs as rows
from knowtree.store.runs import process_alive

log = logging.getLogger("knowtree.server.jobs")

FINAL = ("done", "failed", "cancelled")
#: seconds a claimed job stays its owner's without a heartbeat (renewed every third of it)
LEASE_SECONDS = 30.0


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:").strip("[]")
    except OSError:
        return "-"


def new_owner() -> str:
    """A worker's identity: host, PID namespace, pid and a nonce (`host|pidns|pid|nonce`)."""
    import socket

    return f"{socket.gethostname()}|{_pid_namespace()}|{os.getpid()}|{uuid.uuid4().hex[:8]}"


def owner_gone(owner: str | None) -> bool:
    """Whether `owner` is certainly dead: a process of this host and PID namespace that no longer
    exists. Any other owner (another host, another container) may be alive: only its lease tells."""
    import socket

    parts = (owner or "").split("|")
    if len(parts) != 4 or not parts[2].isdigit():
        return False
    host, pidns, pid, _ = parts
    if host != socket.gethostname() or pidns != _pid_namespace() or int(pid) == os.getpid():
        return False
    return not process_alive(int(pid), host)


class JobCancelled(Exception):
    """Raised inside a running job's progress hook once a cancel was requested."""


class JobLost(JobCancelled):
    """Raised inside a running job's progress hook when its owner no longer holds the job's lease
    (another worker took it over): the job's result is not written by this owner."""


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
    owner: str | None = None
    lease_until: float | None = None
    idem_key: str | None = None


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
        owner=r[13],
        lease_until=r[14],
        idem_key=r[15],
    )


class JobStore:
    """The jobs of one store (its SQL: `knowtree.store.jobs`)."""

    def __init__(self, store: SQLStore, *, lease_seconds: float = LEASE_SECONDS) -> None:
        self.store = store
        self.lease_seconds = lease_seconds

    def create(
        self, tenant: str, kind: str, tree: str, params: dict[str, Any], *, idem_key: str | None = None
    ) -> Job:
        """Queue a job. With `idem_key`, the tenant's job queued with the same key before is returned
        instead of a second one (a client repeating its request)."""
        job_id = rows.insert_job(self.store, uuid.uuid4().hex[:16], tenant, kind, tree, params, _now(), idem_key)
        job = self.get(job_id)
        assert job is not None
        return job

    def get(self, job_id: str) -> Job | None:
        row = rows.job_row(self.store, job_id)
        return _job(row) if row else None

    def list(self, tenant: str | None, limit: int = 50) -> list[Job]:
        return [_job(r) for r in rows.job_rows(self.store, tenant, limit)]

    def unfinished_uploads(self) -> set[str]:
        """The upload folders of the jobs still queued or running."""
        return {str(p["uploads"]) for p in rows.unfinished_params(self.store) if p.get("uploads")}

    def claim_next(self, owner: str) -> Job | None:
        """Give `owner` the oldest claimable job (queued, or running under an expired lease or a dead
        owner of this host) and return it; None when there is none.

        One write transaction and a conditional UPDATE whose row count says whether the claim won
        (`knowtree.store.jobs.claim_job`: `BEGIN IMMEDIATE` on SQLite, `FOR UPDATE SKIP LOCKED` on
        PostgreSQL): two workers, in one process or many, never both get a job. The one place that
        decides ownership."""
        job_id = rows.claim_job(
            self.store, owner, now=time.time(), lease_seconds=self.lease_seconds, stamp=_now(),
            owner_gone=owner_gone,
        )
        return self.get(job_id) if job_id is not None else None

    def renew(self, job_id: str, owner: str) -> bool:
        """Extend `owner`'s lease on a running job; False when the job is no longer its own."""
        return rows.renew_lease(self.store, job_id, owner, time.time() + self.lease_seconds)

    def release(self, job_id: str, owner: str) -> bool:
        """A worker stopping gracefully hands its running job back to the queue."""
        return rows.release_job(self.store, job_id, owner, _now())

    def takeovers(self) -> int:
        """Running jobs another worker may take over now (expired lease, or no lease at all)."""
        return rows.count_takeovers(self.store, time.time())

    def cancel_requested(self, job_id: str) -> bool:
        return rows.cancel_flag(self.store, job_id)

    def set_progress(self, job_id: str, progress: dict[str, Any], owner: str | None = None) -> bool:
        """Record progress; returns whether a cancel was requested. With `owner`: raises `JobLost`
        when the job is not that owner's any more (nothing is written)."""
        written, cancelled = rows.write_progress(self.store, job_id, progress, _now(), owner)
        if not written and owner is not None:
            raise JobLost(job_id)
        return cancelled

    def finish(
        self,
        job_id: str,
        state: str,
        *,
        report: dict[str, Any] | None = None,
        error: str | None = None,
        owner: str | None = None,
    ) -> bool:
        """Record a job's end; with `owner`, only while that owner still holds it (returns whether
        the row was written)."""
        return rows.finish_job(self.store, job_id, state, report=report, error=error, stamp=_now(), owner=owner)

    def request_cancel(self, job_id: str) -> Job | None:
        """Cancel a job: a queued one at once, a running one at its next progress step."""
        rows.cancel_job(self.store, job_id, _now())
        return self.get(job_id)


Runner = Callable[[Job, Callable[[dict[str, Any]], None]], dict[str, Any]]


class _Heartbeat:
    """Renews a job's lease every third of its length while the job runs; `lost` is set once a
    renewal finds the job is not this owner's any more."""

    def __init__(self, jobs: JobStore, job_id: str, owner: str) -> None:
        self.jobs, self.job_id, self.owner = jobs, job_id, owner
        self.lost = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"knowtree-lease-{job_id}", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(5.0)

    def _beat(self) -> None:
        while not self._done.wait(self.jobs.lease_seconds / 3):
            try:
                if not self.jobs.renew(self.job_id, self.owner):
                    log.warning("job %s: lease lost to another worker; this worker stops it", self.job_id)
                    self.lost.set()
                    return
            except Exception as exc:  # a busy database: try again at the next beat
                log.warning("job %s: lease renewal failed: %s", self.job_id, exc)


class JobWorker:
    """One background thread running claimed jobs one at a time with `runner(job, report_progress)`."""

    def __init__(self, jobs: JobStore, runner: Runner, *, poll_seconds: float = 0.5,
                 on_end: Callable[[Job], None] | None = None) -> None:
        self.jobs = jobs
        self.runner = runner
        self.on_end = on_end  # called once a job is done, failed or cancelled (its uploads go)
        self.poll_seconds = poll_seconds
        self.owner = new_owner()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.current: Job | None = None  # the job this worker runs now

    def start(self) -> int:
        """Start the worker; returns how many running jobs of a dead worker it may take over now
        (a job whose owner is alive is left to it)."""
        waiting = self.jobs.takeovers()
        self._thread = threading.Thread(target=self._loop, name="knowtree-jobs", daemon=True)
        self._thread.start()
        return waiting

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop claiming; the running job stops at its next progress step and goes back to the
        queue. When it has not stopped within `timeout`, its lease is handed back all the same (the
        stopped thread writes nothing more: its progress writes find the job not its own)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            current = self.current
            if self._thread.is_alive() and current is not None and self.jobs.release(current.id, self.owner):
                log.warning("job %s handed back to the queue: its step outlasted the stop", current.id)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                job = self.jobs.claim_next(self.owner)
            except Exception as exc:  # a busy database: try again at the next poll
                log.warning("claiming a job failed: %s", exc)
                job = None
            if job is None:
                self._wake.wait(self.poll_seconds)
                self._wake.clear()
                continue
            self.run_one(job)

    def run_one(self, job: Job) -> None:
        self.current = job
        try:
            with _Heartbeat(self.jobs, job.id, self.owner) as beat:
                self._run(job, beat)
        finally:
            self.current = None

    def _run(self, job: Job, beat: _Heartbeat) -> None:
        last = [0.0]
        owner = self.owner

        def report_progress(progress: dict[str, Any]) -> None:
            if beat.lost.is_set():
                raise JobLost(job.id)
            now = time.monotonic()
            final = progress.get("done") == progress.get("total")
            if now - last[0] < 0.2 and not final:  # throttle writes; the cancel flag is still read
                cancelled = self.jobs.cancel_requested(job.id)
            else:
                last[0] = now
                cancelled = self.jobs.set_progress(job.id, progress, owner)
            if cancelled or self._stop.is_set():
                raise JobCancelled(job.id)

        try:
            report = self.runner(job, report_progress)
        except JobLost:
            log.warning("job %s was taken over by another worker: this worker's run is dropped", job.id)
            return
        except JobCancelled:
            if self._stop.is_set() and not self._cancel_requested(job.id):
                self.jobs.release(job.id, owner)  # shutting down: the next worker runs it again
                return
            ended = self._finish(job.id, "cancelled", error="cancelled on request")
        except Exception as exc:  # a job's failure is recorded on the job, never crashes the worker
            log.info("job %s failed: %s", job.id, exc)
            ended = self._finish(job.id, "failed", error=_describe(exc))
        else:
            ended = self._finish(job.id, "done", report=report)
        # only the worker that wrote the job's end cleans up after it (its uploads go): a worker
        # that lost its lease leaves them to the one that took the job over
        if ended and self.on_end is not None:
            try:
                self.on_end(job)
            except Exception:  # cleaning up after a job never stops the worker
                log.exception("ending job %s", job.id)

    def _finish(self, job_id: str, state: str, **result: Any) -> bool:
        if self.jobs.finish(job_id, state, owner=self.owner, **result):
            return True
        log.warning("job %s: no longer this worker's (lease lost); its result (%s) is not written", job_id, state)
        return False

    def _cancel_requested(self, job_id: str) -> bool:
        job = self.jobs.get(job_id)
        return bool(job and job.cancel_requested)


def _describe(exc: Exception) -> str:
    from knowtree.errors import KnowtreeError

    if isinstance(exc, KnowtreeError):
        return str(exc)
    return f"internal error ({type(exc).__name__})"
