"""Trees: list, outline, nodes, search, delete, and builds (server-side paths or uploaded files)."""

from __future__ import annotations

import json
import shutil
from typing import Annotated

from fastapi import APIRouter, File, Form, Query, UploadFile

from knowtree.server.deps import Caller, NodeId, Svc, TreeName, job_out
from knowtree.server.models import (
    BuildRequest,
    Deleted,
    EnrichRequest,
    JobOut,
    NodeView,
    Outline,
    SearchResult,
    TreeSummary,
)
from knowtree.server.problems import Problem
from knowtree.server.uploads import save_uploads

router = APIRouter(prefix="/v1/trees", tags=["trees"])

# Reads of a cached tree are short, in-memory work: they run on the event loop (async) instead of
# hopping to a worker thread. Anything that may call a model or write stays sync (thread pool).
@router.get("", response_model=list[TreeSummary], summary="List the caller's trees and memories")
async def list_trees(p: Caller, svc: Svc) -> list[TreeSummary]:
    return svc.list_trees(p)


@router.get("/{tree}", response_model=Outline, summary="A tree's info and outline (titles, summaries, spans)")
async def outline(
    tree: TreeName, p: Caller, svc: Svc,
    depth: Annotated[int | None, Query(ge=0, le=50, description="levels below the root")] = None,
) -> Outline:
    info, root = svc.outline(p, tree, depth)
    return Outline(tree=info, root=root)


@router.delete("/{tree}", response_model=Deleted, summary="Delete a tree or memory")
def delete_tree(tree: TreeName, p: Caller, svc: Svc) -> Deleted:
    svc.delete_tree(p, tree)
    return Deleted(deleted=tree)


@router.delete("/{tree}/documents", response_model=Deleted, summary="Delete one document and its nodes")
def delete_document(
    tree: TreeName, p: Caller, svc: Svc,
    path: Annotated[str, Query(min_length=1, max_length=1000, description="the document's path")],
) -> Deleted:
    svc.delete_document(p, tree, path)
    return Deleted(deleted=path)


@router.get("/{tree}/nodes/{node_id}", response_model=NodeView, summary="One node (id or prefix) and its children")
async def node(tree: TreeName, node_id: NodeId, p: Caller, svc: Svc) -> NodeView:
    return svc.node_view(p, tree, node_id)


@router.get("/{tree}/search", response_model=SearchResult, summary="Lexical (BM25) search over nodes")
async def search(
    tree: TreeName, p: Caller, svc: Svc,
    q: Annotated[str, Query(min_length=1, max_length=1000)],
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
) -> SearchResult:
    return SearchResult(tree=tree, query=q, hits=svc.search(p, tree, q, limit))


@router.post("/{tree}/build", response_model=JobOut, status_code=202,
             summary="Build from server-side paths (under the allowed roots) as a background job")
def build(tree: TreeName, body: BuildRequest, p: Caller, svc: Svc) -> JobOut:
    svc.writable(p)
    paths = [svc.allowed_path(p, x) for x in body.paths]
    job = svc.submit_build(p, tree, paths, add=body.add, meta=body.meta)
    svc.wake_worker()
    return job_out(svc, p, job)


@router.post("/{tree}/enrich", response_model=JobOut, status_code=202,
             summary="Add model-written metadata to a tree built without it, as a background job (resumable)")
def enrich(tree: TreeName, body: EnrichRequest, p: Caller, svc: Svc) -> JobOut:
    job = svc.submit_enrich(p, tree, body.model_dump())
    svc.wake_worker()
    return job_out(svc, p, job)


@router.post("/{tree}/upload", response_model=JobOut, status_code=202,
             summary="Build from uploaded files (.txt .md .pdf .docx .html) as a background job")
async def upload(
    tree: TreeName,
    p: Caller,
    svc: Svc,
    files: Annotated[list[UploadFile], File(description="the documents")],
    add: Annotated[bool, Form(description="keep the documents already in the tree")] = False,
    meta: Annotated[str | None, Form(description='JSON object of document metadata, e.g. {"year": "2024"}')] = None,
) -> JobOut:
    svc.writable(p)
    svc.stored_name(p, tree)
    metadata = _meta(meta)
    target, saved = await save_uploads(svc.upload_root(), {"files": files}, svc.config.max_upload_bytes,
                                       max_inflated=svc.config.inflate_cap)
    try:
        job = svc.submit_build(p, tree, saved.get("files", []), add=add, meta=metadata, uploads=target)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    svc.wake_worker()
    return job_out(svc, p, job)


def _meta(raw: str | None) -> dict[str, str] | None:
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise Problem(400, f"meta: not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise Problem(400, "meta: a JSON object of strings")
    return data
