"""FastAPI dependencies shared by the route modules."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from knowtree.server.auth import principal
from knowtree.server.jobs import Job
from knowtree.server.models import JobOut
from knowtree.server.service import Service
from knowtree.server.tenancy import Principal


def service(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


Caller = Annotated[Principal, Depends(principal)]
Svc = Annotated[Service, Depends(service)]


def job_out(svc: Service, p: Principal, job: Job) -> JobOut:
    return JobOut(
        id=job.id,
        kind=job.kind,
        tree=svc.shown_job_tree(p, job),
        state=job.state,  # type: ignore[arg-type]
        progress=job.progress,
        report=svc.tenant_report(job, job.report),
        error=svc.tenant_text(job, job.error) if job.error else job.error,
        cancel_requested=job.cancel_requested,
        attempts=job.attempts,
        created=job.created,
        updated=job.updated,
    )
