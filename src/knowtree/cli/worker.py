"""`knowtree worker`: run the queued jobs of a database without serving HTTP.

Any number of workers and `knowtree serve --no-worker` replicas share one store: each job is
claimed by one worker under a lease its heartbeat renews (`knowtree.server.jobs`), its progress and
result are written to its row, so every replica's `GET /v1/jobs/{id}` and SSE stream read them.
SIGTERM (or Ctrl-C) stops claiming, hands the running job back to the queue and exits.
"""

from __future__ import annotations

import signal
import threading
from typing import Annotated

import typer

from knowtree.cli.common import err, open_kt, run
from knowtree.cli.options import DbOpt, ModelOpt
from knowtree.cli.serve import MISSING, check_database, tenant_roots


def worker_command(
    db: DbOpt = None,
    model: ModelOpt = None,
    concurrency: Annotated[int | None, typer.Option(help="model calls at once per job [default: 4]")] = None,
    allow_root: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-root",
            help="directory builds may read from (repeatable); none given: the roots each job was queued under",
        ),
    ] = None,
    tenant_root: Annotated[
        list[str] | None, typer.Option("--tenant-root", help="TENANT=DIR, as for serve (repeatable)")
    ] = None,
    job_lease: Annotated[
        float,
        typer.Option(
            "--job-lease", min=1.0, max=3600.0,
            help="seconds a running job stays this worker's without a heartbeat; another worker takes it"
            " over only after that",
        ),
    ] = 30.0,
    poll: Annotated[float, typer.Option(min=0.05, max=60.0, help="seconds between looks at the queue")] = 0.5,
    stop_timeout: Annotated[
        float, typer.Option(min=0.0, help="seconds SIGTERM waits for the running job's step before handing it back")
    ] = 30.0,
    check: Annotated[str, typer.Option(help="check of the database before starting: fast | quick | full")] = "quick",
) -> None:
    """Run queued build jobs (builds, enrich, memory adds, knowledge bases) from the database, no HTTP."""
    if check not in ("fast", "quick", "full"):
        raise typer.BadParameter(f"--check {check!r}: use fast, quick or full")

    def go() -> None:
        try:
            from knowtree.server.config import ServerConfig
            from knowtree.server.jobs import JobWorker
            from knowtree.server.service import Service
        except ImportError:
            raise err(MISSING, 2) from None
        config = ServerConfig(
            allowed_roots=allow_root or [],
            tenant_roots=tenant_roots(tenant_root or []),
            job_lease_seconds=job_lease,
            mcp=False,
        )
        check_database(db, check)
        kt = open_kt(db=db, model=model, concurrency=concurrency)
        stopping = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            stopping.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        with kt:
            service = Service(kt, config)
            worker = JobWorker(service.jobs, service.run_job, poll_seconds=poll, on_end=service.job_ended)
            waiting = worker.start()
            service.worker = worker
            typer.echo(f"worker {worker.owner} running jobs of {kt.settings.db}"
                       + (f" ({waiting} to take over)" if waiting else ""), err=True)
            try:
                while not stopping.wait(1.0):
                    pass
            finally:
                worker.stop(stop_timeout)
                for s, handler in previous.items():
                    signal.signal(s, handler)
        typer.echo("worker stopped", err=True)

    run(go, bulk=True)
