"""Questions: ask (JSON, or Server-Sent Events with `stream`), and retrieve (evidence only)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from knowtree.server.deps import Caller, Svc, TreeName
from knowtree.server.models import AskRequest, RetrieveRequest, RetrieveResult
from knowtree.server.sse import Emit, run_streaming, sse_response
from knowtree.types import Answer, NavStep

router = APIRouter(prefix="/v1/trees", tags=["questions"])


@router.post(
    "/{tree}/ask",
    response_model=Answer,
    summary="Answer a question by navigating the tree (citations and trace included)",
    responses={200: {"content": {"text/event-stream": {}}, "description": "the Answer, or with stream=true "
                     "events: step (a navigation step), token (answer text), answer (the checked Answer), error"}},
)
def ask(tree: TreeName, body: AskRequest, p: Caller, svc: Svc) -> Any:
    if not body.stream:
        return svc.ask(p, tree, body)
    svc.tree(p, tree)  # a missing tree is a 404 before the stream starts

    def work(emit: Emit) -> tuple[str, Any]:
        def on_step(step: NavStep) -> None:
            emit("step", step)

        def on_token(text: str) -> None:
            emit("token", {"text": text})

        return "answer", svc.ask(p, tree, body, on_step=on_step, on_token=on_token)

    response: StreamingResponse = sse_response(run_streaming(work))
    return response


@router.post("/{tree}/retrieve", response_model=RetrieveResult,
             summary="Evidence for a question, no answer: messages or leaf text with citations, within a token budget")
async def retrieve(tree: TreeName, body: RetrieveRequest, p: Caller, svc: Svc) -> RetrieveResult:
    args = (p, tree, body.question, body.budget_tokens, body.use_model)
    if svc.view(p, tree).info.kind == "conversation":  # hybrid scoring or a model walk: in a thread
        method, evidence = await run_in_threadpool(svc.retrieve, *args)
    else:  # a cached document tree: one FTS query and in-memory work, on the event loop
        method, evidence = svc.retrieve(*args)
    return RetrieveResult(tree=tree, question=body.question, method=method, evidence=evidence)
