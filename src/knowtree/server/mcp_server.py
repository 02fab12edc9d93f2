"""knowtree as an MCP server (official `mcp` SDK): over stdio (`knowtree mcp`) and mounted on the HTTP
server as streamable HTTP at /mcp, where the caller's API key decides which trees it sees.

Tools are thin: each calls the same `Service` method as the matching REST route.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from knowtree.errors import KnowtreeError
from knowtree.server.models import MAX_POSITION, AskRequest
from knowtree.server.problems import Problem, from_library_error
from knowtree.server.service import Service, brief
from knowtree.server.tenancy import LOCAL_PRINCIPAL, Principal

INSTRUCTIONS = (
    "knowtree is a long-term memory organised as trees. Document trees hold files (sections with page or "
    "line ranges); conversation memories hold messages under dated sessions and topics. Use list_trees "
    "first. Store what the user says with remember (and forget_message what they ask you to forget); get "
    "relevant past messages with recall (cheap, no "
    "answer) or a cited answer with ask. Browse a tree with view_node (start without node_id at the root) "
    "and read a topic's messages with get_node_messages. For a user's support problem, kb_ask a knowledge "
    "base. Cite sources as the tools give them."
)


class MessageArg(BaseModel):
    role: str = Field(..., description="user | assistant | system")
    content: str = Field(..., description="the message text, verbatim")
    name: str | None = Field(None, description="who spoke (a person's name), if known")
    timestamp: str | None = Field(None, description="when, ISO 8601 (e.g. 2024-03-01T10:00), if known")


PrincipalOf = Callable[[Context | None], Principal]


def stdio_principal(ctx: Context | None) -> Principal:
    return LOCAL_PRINCIPAL


def http_principal(ctx: Context | None) -> Principal:
    """The caller authenticated by the HTTP wrapper (`auth.McpAuth`), read from the request scope."""
    request = None
    try:
        request = ctx.request_context.request if ctx is not None else None
    except ValueError:
        request = None
    scope = getattr(request, "scope", None) or {}
    who = (scope.get("state") or {}).get("principal")
    if not isinstance(who, Principal):
        raise ToolError("not authenticated")
    return who


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    except Problem as p:
        raise ToolError(p.detail) from None
    except KnowtreeError as exc:
        raise ToolError(from_library_error(exc).detail) from None


def build_mcp(service: Callable[[], Service], principal_of: PrincipalOf = stdio_principal) -> MCPServer:
    mcp = MCPServer("knowtree", instructions=INSTRUCTIONS)

    @mcp.tool(description="List the trees and conversation memories you can use: name, kind (document | "
              "conversation), size. Call this first to learn the names the other tools take.")
    async def list_trees(ctx: Context) -> list[dict[str, Any]]:
        p = principal_of(ctx)
        return [t.model_dump() for t in await _call(service().list_trees, p)]

    @mcp.tool(description="Store messages in a conversation memory (created on first use), verbatim, so "
              "they can be recalled later. Send the new turns of the conversation, in order; include "
              "name and timestamp when known. Returns how many messages the memory now holds.")
    async def remember(memory: str, messages: list[MessageArg], ctx: Context) -> dict[str, Any]:
        p = principal_of(ctx)
        records = [m.model_dump(exclude_none=True) for m in messages]
        report = await _call(service().add_messages, p, memory, records)
        return {"memory": memory, "added": report.added, "messages": report.messages, "nodes": report.nodes}

    @mcp.tool(description="Forget one message of a conversation memory, by its position (as recall, ask "
              "and get_node_messages cite it) — use it when the user asks you to forget something they "
              "said. Only that message goes; every other message keeps its position, so earlier "
              "citations stay valid, and the summaries that mentioned it are rewritten.")
    async def forget_message(memory: str, position: Annotated[int, Field(ge=1, le=MAX_POSITION)], ctx: Context) -> dict[str, Any]:
        p = principal_of(ctx)
        report = await _call(service().delete_message, p, memory, position)
        return {"memory": memory, "deleted": report.position, "messages": report.messages}

    @mcp.tool(description="Recall what a memory or document tree holds about a question, as evidence "
              "(no answer): the relevant messages or passages in time/document order, within "
              "budget_tokens, each with its citation (memory position, speaker, time; or file and "
              "lines/pages). Use it to put past context into your own reasoning.")
    async def recall(tree: str, query: str, ctx: Context,
                     budget_tokens: Annotated[int, Field(ge=50, le=100_000)] = 800) -> dict[str, Any]:
        p = principal_of(ctx)
        method, evidence = await _call(service().retrieve, p, tree, query, max(50, budget_tokens), False)
        return {"tree": tree, "method": method, "evidence": [e.model_dump(mode="json") for e in evidence]}

    @mcp.tool(description="Answer a question from a tree or memory by navigating it; the answer comes "
              "with citations (file and lines/pages, or message position, speaker and time) and a status: "
              "complete, partial (some of it found) or none (not in the tree — do not guess).")
    async def ask(tree: str, question: str, ctx: Context) -> dict[str, Any]:
        p = principal_of(ctx)
        answer = await _call(service().ask, p, tree, AskRequest(question=question))
        return {
            "answer": answer.answer,
            "status": answer.status,
            "citations": [c.model_dump(mode="json", exclude_none=True) for c in answer.citations],
        }

    @mcp.tool(description="Look up a user's problem in a knowledge base (support issues with solutions "
              "grounded in product documents): returns the matching known issue, how well it matches "
              "(exact, subset, ... or none), the solution text for the user's situation and its citations "
              "(document id and the quoted passage), and the document passages that bear on the query itself. "
              "Pass the user's words as the query. If match is none, the knowledge base has no known issue "
              "for it: say so and use only the passages, do not improvise a fix. An unknown name lists yours.")
    async def kb_ask(kb: str, query: str, ctx: Context) -> dict[str, Any]:
        p = principal_of(ctx)
        kbs = service().kbs

        def run() -> dict[str, Any]:
            try:
                data = kbs.ask(p, kb, query)
            except Problem as exc:
                if exc.status != 404:
                    raise
                names = ", ".join(k.name for k in kbs.list(p)) or "none"
                raise Problem(404, f"no knowledge base named {kb!r} (yours: {names})") from None
            keys = ("match", "issue", "solution", "citations", "status", "query_metadata", "passages")
            return {"kb": kb, **{k: data[k] for k in keys}}

        return await _call(run)

    @mcp.tool(description="Look at one node of a tree and its children: title, summary and metadata, "
              "page/line or message span, text (leaves), and the children's ids and summaries. Omit "
              "node_id to start at the root; follow child ids to go deeper.")
    async def view_node(tree: str, ctx: Context, node_id: str | None = None) -> dict[str, Any]:
        p = principal_of(ctx)
        svc = service()
        if not node_id:
            t = await _call(svc.tree, p, tree)
            node_id = t.info.root_id or ""
        view = await _call(svc.node_view, p, tree, node_id)
        data = view.model_dump(mode="json")
        data["text"] = data["text"][:4000]
        return data

    @mcp.tool(description="Read the messages under a node of a conversation memory (a session or topic), "
              "verbatim with position, speaker and time; at most `limit` messages from the start.")
    async def get_node_messages(memory: str, node_id: str, ctx: Context,
                                limit: Annotated[int, Field(ge=1, le=5000)] = 50) -> dict[str, Any]:
        p = principal_of(ctx)
        svc = service()

        def run() -> dict[str, Any]:
            t = svc.view(p, memory)
            if t.info.kind != "conversation":
                raise Problem(400, f"{memory!r} is a document tree: use view_node")
            view = svc.node_view(p, memory, node_id)
            leaves: set[str] = set()
            stack = [view.id]
            while stack:
                n = t.nodes[stack.pop()]
                if n.is_leaf:
                    leaves.add(n.id)
                stack.extend(c for c in n.children if c in t.nodes)
            rows = [r for r in svc.messages(p, memory) if r.get("node_id") in leaves]
            keys = ("position", "role", "name", "content", "timestamp")
            return {
                "memory": memory,
                "node": brief(t.nodes[view.id]).model_dump(mode="json"),
                "total": len(rows),
                "messages": [{k: r.get(k) for k in keys} for r in rows[: max(1, limit)]],
            }

        return await _call(run)

    @mcp.tool(description="Build (or rebuild) a document tree from files or directories on the server "
              "(only under the roots the server allows). Runs in the background: returns a job id; "
              "check it with job_status.")
    async def build(tree: str, paths: list[str], ctx: Context, add: bool = False) -> dict[str, Any]:
        p = principal_of(ctx)
        svc = service()

        def run() -> dict[str, Any]:
            svc.writable(p)
            resolved = [svc.allowed_path(p, x) for x in paths]
            job = svc.submit_build(p, tree, resolved, add=add)
            svc.wake_worker()
            return {"job": job.id, "state": job.state}

        return await _call(run)

    @mcp.tool(description="State of a background job (build): queued, running (with progress), done (with "
              "its report), failed (with the error) or cancelled.")
    async def job_status(job_id: str, ctx: Context) -> dict[str, Any]:
        p = principal_of(ctx)
        svc = service()
        job = await _call(svc.job, p, job_id)
        return {"job": job.id, "state": job.state, "progress": job.progress, "report": svc.tenant_report(job, job.report),
                "error": svc.tenant_text(job, job.error) if job.error else None}

    return mcp
