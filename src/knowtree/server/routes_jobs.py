"""Background jobs (list, state, cancel, live progress over SSE) and the ledger."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query

from knowtree.server.deps import Caller, JobId, Svc, job_out
from knowtree.server.jobs import FINAL
from knowtree.server.models import TREE_NAME, JobOut, LedgerRun
from knowtree.server.sse import format_event, sse_response

router = APIRouter(prefix="/v1", tags=["jobs"])


@router.get("/jobs", response_model=list[JobOut], summary="The caller's jobs, newest first")
def list_jobs(p: Caller, svc: Svc, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[JobOut]:
    return [job_out(svc, p, j) for j in svc.list_jobs(p, limit)]


@router.get("/jobs/{job_id}", response_model=JobOut, summary="One job: state, progress, report or error")
def get_job(job_id: JobId, p: Caller, svc: Svc) -> JobOut:
    return job_out(svc, p, svc.job(p, job_id))


@router.post("/jobs/{job_id}/cancel", response_model=JobOut, summary="Cancel a queued or running job")
def cancel_job(job_id: JobId, p: Caller, svc: Svc) -> JobOut:
    return job_out(svc, p, svc.cancel_job(p, job_id))


@router.get(
    "/jobs/{job_id}/events",
    summary="Live progress as Server-Sent Events: progress… then done | failed | cancelled with the job",
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def job_events(job_id: JobId, p: Caller, svc: Svc) -> Any:
    first = await asyncio.to_thread(svc.job, p, job_id)

    async def events() -> AsyncIterator[bytes]:
        last: tuple[str, str] | None = None
        job = first
        while True:
            out = job_out(svc, p, job)
            key = (job.state, job.updated)
            if job.state in FINAL:
                yield format_event(job.state, out)
                return
            if key != last:
                yield format_event("progress", out)
                last = key
            await asyncio.sleep(0.2)
            job = await asyncio.to_thread(svc.job, p, job_id)

    return sse_response(events())


@router.get("/ledger", response_model=list[LedgerRun], summary="Model calls, tokens and cost per build and question")
def ledger(
    p: Caller, svc: Svc,
    tree: Annotated[str | None, Query(pattern=TREE_NAME, description="one tree's runs")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 20,
) -> list[LedgerRun]:
    return [LedgerRun(**r) for r in svc.ledger(p, tree, limit)]  # type: ignore[arg-type]
