"""Conversation memories: create, add messages (now or as a background job), read and delete messages."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query
from fastapi.responses import JSONResponse

from knowtree.server.deps import Caller, MemoryName, Svc, job_out
from knowtree.server.models import (
    MAX_POSITION,
    AddMessages,
    AddReportOut,
    CreateMemory,
    JobOut,
    Message,
    MessageDeleted,
    Messages,
)
from knowtree.server.problems import Problem
from knowtree.server.service import Service
from knowtree.server.tenancy import Principal

router = APIRouter(prefix="/v1/memories", tags=["memories"])

_ADDED = {202: {"model": JobOut, "description": "background=true: the job adding the messages"}}
IdemKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key", max_length=255,
        description="the same key again means the same request again: messages it stored are not stored"
        " twice, and a background add returns the job queued with the key",
    ),
]


#: batches one synchronous add may run (each is a model call): a request's work stays bounded, as its size is
MAX_SYNC_BATCHES = 200


def _add(svc: Service, p: Principal, name: str, body: AddMessages, header_key: str | None = None) -> Any:
    if not body.background and body.batch_size and -(-len(body.messages) // body.batch_size) > MAX_SYNC_BATCHES:
        raise Problem(422, f"{len(body.messages)} messages in batches of {body.batch_size} would run more than"
                           f" {MAX_SYNC_BATCHES} batches in one request: add them with background: true, or in"
                           " larger batches")
    records = [m.model_dump(exclude_none=True) for m in body.messages]
    if header_key is not None and body.idempotency_key is not None and header_key != body.idempotency_key:
        raise Problem(400, "the Idempotency-Key header and the body's idempotency_key differ: send one")
    if header_key is not None and not header_key.strip():
        raise Problem(400, "Idempotency-Key: an empty key")
    key = body.idempotency_key if body.idempotency_key is not None else header_key
    if body.background:
        job = svc.submit_add(p, name, records, body.batch_size, key)
        svc.wake_worker()
        return JSONResponse(job_out(svc, p, job).model_dump(mode="json"), status_code=202)
    report = svc.add_messages(p, name, records, body.batch_size, key)
    data = dict(report.__dict__)
    data["usage"] = report.usage.model_dump()
    data["memory"] = name
    return AddReportOut(**{k: data[k] for k in AddReportOut.model_fields})


@router.post("", response_model=AddReportOut, status_code=201, responses=_ADDED,
             summary="Create a conversation memory, optionally with its first messages")
def create_memory(body: CreateMemory, p: Caller, svc: Svc, idempotency_key: IdemKey = None) -> Any:
    svc.writable(p)
    if not body.messages:  # an empty memory: validated name, nothing stored until the first message
        svc.stored_name(p, body.name)
        return AddReportOut(memory=body.name, added=0, skipped=0, messages=0, nodes=0, depth=0, batches=0,
                            seconds=0.0, usage={})
    return _add(svc, p, body.name, body, idempotency_key)


@router.post("/{memory}/messages", response_model=AddReportOut, responses=_ADDED,
             summary="Add messages (one exchange or many) to a memory; creates it if needed")
def add_messages(memory: MemoryName, body: AddMessages, p: Caller, svc: Svc, idempotency_key: IdemKey = None) -> Any:
    return _add(svc, p, memory, body, idempotency_key)


@router.get("/{memory}/messages", response_model=Messages, summary="Stored messages, verbatim, by position")
def list_messages(
    memory: MemoryName, p: Caller, svc: Svc,
    start: Annotated[int, Query(ge=1, le=MAX_POSITION, description="first position")] = 1,
    end: Annotated[int | None, Query(ge=1, le=MAX_POSITION, description="last position (inclusive)")] = None,
) -> Messages:
    rows = svc.messages(p, memory, start, end)
    return Messages(memory=memory, messages=[
        Message(**{k: r.get("source_id" if k == "id" else k) for k in Message.model_fields}) for r in rows
    ])


@router.delete("/{memory}/messages/{position}", response_model=MessageDeleted,
               summary="Delete one message; the others keep their positions, the summaries that described it are rewritten")
def delete_message(memory: MemoryName, position: Annotated[int, Path(ge=1, le=MAX_POSITION)], p: Caller, svc: Svc) -> MessageDeleted:
    report = svc.delete_message(p, memory, position)
    data = dict(report.__dict__)
    data["usage"] = report.usage.model_dump()
    return MessageDeleted(**{k: data[k] for k in MessageDeleted.model_fields})
