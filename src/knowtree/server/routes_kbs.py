"""Knowledge bases (AutoKB): list, show, ask, export, delete; build and add as background jobs from
server-side paths (under the caller's allowed roots) or uploaded files."""

from __future__ import annotations

import json
import shutil
from typing import Annotated, Any, Literal

from fastapi import APIRouter, File, Form, Query, UploadFile
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from knowtree.server.deps import Caller, KBName, Svc, job_out
from knowtree.server.models import Deleted, JobOut
from knowtree.server.models_kb import (
    EMBEDDER,
    KBAddRequest,
    KBAnswerOut,
    KBAskRequest,
    KBBuildRequest,
    KBExportRow,
    KBRule,
    KBRulesOut,
    KBRulesRequest,
    KBSummary,
    KBView,
)
from knowtree.server.problems import Problem
from knowtree.server.uploads import UPLOAD_SUFFIXES, save_uploads

router = APIRouter(prefix="/v1/kbs", tags=["knowledge bases"])

ISSUE_FILES = {".jsonl", ".ndjson", ".csv"}
KB_SUFFIXES = {
    "issues": ISSUE_FILES,
    "docs": UPLOAD_SUFFIXES | {".jsonl", ".ndjson", ".jsonl.gz"},
    "attributes": {".toml", ".yaml", ".yml", ".json"},
    "rules": {".toml", ".yaml", ".yml", ".json", ".txt", ".md"},
}


@router.get("", response_model=list[KBSummary], summary="List the caller's knowledge bases")
def list_kbs(p: Caller, svc: Svc) -> list[KBSummary]:
    return svc.kbs.list(p)


@router.get("/{kb}", response_model=KBView, summary="Themes → parent issues → child issues, with solution status")
def show(kb: KBName, p: Caller, svc: Svc) -> KBView:
    return KBView(**svc.kbs.show(p, kb))


@router.post("/{kb}/ask", response_model=KBAnswerOut,
             summary="Answer a user's issue: the matched KB issue, match type, solution and its citations")
def ask(kb: KBName, body: KBAskRequest, p: Caller, svc: Svc) -> KBAnswerOut:
    return KBAnswerOut(**svc.kbs.ask(p, kb, body.query, k=body.k, metadata=body.metadata, solve=body.solve,
                                     passages=body.passages))


@router.get(
    "/{kb}/export",
    response_model=list[KBExportRow],
    summary="Every KB issue with its members, metadata, solution and citations (JSON Lines, or JSON)",
    responses={200: {"content": {"application/x-ndjson": {}}, "description": "one KBExportRow a line"}},
)
def export(
    kb: KBName, p: Caller, svc: Svc,
    format: Annotated[Literal["jsonl", "json"], Query(description="jsonl (default) | json")] = "jsonl",
) -> Any:
    rows = svc.kbs.export(p, kb)
    if format == "json":
        return [KBExportRow(**r) for r in rows]
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return Response(body, media_type="application/x-ndjson")


@router.delete("/{kb}", response_model=Deleted, summary="Delete a knowledge base")
def delete(kb: KBName, p: Caller, svc: Svc) -> Deleted:
    svc.kbs.delete(p, kb)
    return Deleted(deleted=kb)


@router.post("/{kb}/build", response_model=JobOut, status_code=202,
             summary="Build from server-side files (under the allowed roots) as a background job")
def build(kb: KBName, body: KBBuildRequest, p: Caller, svc: Svc) -> JobOut:
    job = svc.kbs.submit_build(p, kb, body)
    svc.wake_worker()
    return job_out(svc, p, job)


@router.post("/{kb}/add", response_model=JobOut, status_code=202,
             summary="Add raw issues and/or documents from server-side files as a background job")
def add(kb: KBName, body: KBAddRequest, p: Caller, svc: Svc) -> JobOut:
    job = svc.kbs.submit_add(p, kb, body)
    svc.wake_worker()
    return job_out(svc, p, job)


@router.get("/{kb}/rules", response_model=list[KBRule], summary="The domain rules the KB's solutions are checked under")
def get_rules(kb: KBName, p: Caller, svc: Svc) -> list[KBRule]:
    return [KBRule(**r.__dict__) for r in svc.kbs.kb(svc.kbs.require(p, kb)).rules()]


@router.put("/{kb}/rules", response_model=KBRulesOut,
            summary="Replace the domain rules from a server-side file; stored solutions become stale")
def set_rules(kb: KBName, body: KBRulesRequest, p: Caller, svc: Svc) -> KBRulesOut:
    return KBRulesOut(**svc.kbs.set_rules(p, kb, body.rules))


@router.put("/{kb}/rules/upload", response_model=KBRulesOut,
            summary="Replace the domain rules from an uploaded file; stored solutions become stale")
async def upload_rules(
    kb: KBName, p: Caller, svc: Svc,
    rules: Annotated[UploadFile, File(description="domain rules: .toml, .yaml, .json or .txt")],
) -> KBRulesOut:
    svc.writable(p)
    svc.kbs.require(p, kb)
    target, saved = await save_uploads(svc.upload_root(), {"rules": [rules]}, svc.config.max_upload_bytes, KB_SUFFIXES,
                                       max_inflated=svc.config.inflate_cap)
    try:  # the rules are in the database once set: the file is not kept
        out = await run_in_threadpool(svc.kbs.set_rules, p, kb, saved["rules"][0], uploaded=True)
    finally:
        shutil.rmtree(target, ignore_errors=True)
    return KBRulesOut(**out)


@router.post("/{kb}/upload", response_model=JobOut, status_code=202,
             summary="Build (or, with add=true, grow) from uploaded files as a background job")
async def upload(
    kb: KBName,
    p: Caller,
    svc: Svc,
    issues: Annotated[UploadFile | None, File(description="raw issues: .jsonl or .csv")] = None,
    docs: Annotated[list[UploadFile] | None, File(description="domain documents")] = None,
    attributes: Annotated[UploadFile | None, File(description="attribute configuration: .toml or .yaml")] = None,
    rules: Annotated[UploadFile | None, File(description="domain rules: .toml or .txt")] = None,
    add: Annotated[bool, Form(description="add to an existing knowledge base (issues and/or docs)")] = False,
    solutions: Annotated[Literal["eager", "lazy"], Form()] = "lazy",
    replace: Annotated[bool, Form(description="rebuild a knowledge base that already exists")] = False,
    embedder: Annotated[str | None, Form(pattern=EMBEDDER, description="static (default) | hash[:DIM]")] = None,
) -> JobOut:
    svc.writable(p)
    svc.kbs.stored_name(p, kb)
    groups = {"issues": [issues] if issues else [], "docs": docs or [],
              "attributes": [attributes] if attributes else [], "rules": [rules] if rules else []}
    if not add and not all(groups.values()):
        missing = ", ".join(k for k, v in groups.items() if not v)
        raise Problem(400, f"a build needs issues, docs, attributes and rules files (missing: {missing})")
    if add and not (groups["issues"] or groups["docs"]):
        raise Problem(400, "nothing to add: upload issues and/or docs")
    target, saved = await save_uploads(svc.upload_root(), groups, svc.config.max_upload_bytes, KB_SUFFIXES,
                                       max_inflated=svc.config.inflate_cap)
    try:
        if add:
            body_add = KBAddRequest(issues=(saved.get("issues") or [None])[0], docs=saved.get("docs"))
            job = await run_in_threadpool(svc.kbs.submit_add, p, kb, body_add, uploads=target)
        else:
            body = KBBuildRequest(issues=saved["issues"][0], docs=saved["docs"], attributes=saved["attributes"][0],
                                  rules=saved["rules"][0], solutions=solutions, replace=replace, embedder=embedder)
            job = await run_in_threadpool(svc.kbs.submit_build, p, kb, body, uploads=target)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    svc.wake_worker()
    return job_out(svc, p, job)
