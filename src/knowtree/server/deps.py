"""FastAPI dependencies shared by the route modules."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi import Path as PathParam

from knowtree.server.auth import principal
from knowtree.server.jobs import Job
from knowtree.server.models import JOB_ID, NODE_ID, TREE_NAME, JobOut
from knowtree.server.service import Service
from knowtree.server.tenancy import Principal


def service(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


Caller = Annotated[Principal, Depends(principal)]
Svc = Annotated[Service, Depends(service)]

# Path parameters, with the patterns the service checks (a tenant's names: at most 64 characters, no ':')
TreeName = Annotated[str, PathParam(pattern=TREE_NAME, description="tree or memory name")]
MemoryName = Annotated[str, PathParam(pattern=TREE_NAME, description="conversation memory name")]
KBName = Annotated[str, PathParam(pattern=TREE_NAME, description="knowledge base name")]
NodeId = Annotated[str, PathParam(pattern=NODE_ID, description="node id, or a prefix of one")]
JobId = Annotated[str, PathParam(pattern=JOB_ID, description="job id")]


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
