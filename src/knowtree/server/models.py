"""Request and response models of the HTTP API (the OpenAPI schema is generated from these)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from knowtree.adapters.evidence import Evidence
from knowtree.types import Answer, NodeMeta, Span

TREE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
#: the largest message position a request may name (positions are SQLite integers, < 2**63)
MAX_POSITION = 2**62


#: the names a tenant's node and job ids take (the service checks them too)
NODE_ID = r"^[0-9A-Za-z_-]{1,64}$"
JOB_ID = r"^[0-9a-f]{1,32}$"


class Strict(BaseModel):
    """A request body: unknown fields refused, and no coercion (`0` is not `false`, `"5"` not `5`), so
    what the schema says is what is accepted."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ProblemError(BaseModel):
    loc: list[str]
    msg: str


class ProblemDetail(BaseModel):
    """An RFC 9457 problem (`application/problem+json`): every error the API returns."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[ProblemError] | None = Field(None, description="422: each invalid field")


ERROR_STATUSES = {
    400: "Bad request: a name or value the schema cannot rule out (a memory asked in search mode...)",
    401: "No API key, or an invalid one",
    403: "Forbidden: a read-only key, a path outside the caller's roots, or another site's request",
    404: "No such tree, memory, knowledge base, node or job (or not the caller's)",
    409: "Conflict with what is stored (a memory where a document tree is, an existing knowledge base)",
    413: "The request body, an upload or what a compressed file inflates to is over the server's limit",
    415: "An uploaded file of a type the route does not read",
    422: "A request or a file that does not validate (each invalid field in errors)",
    429: "Over the key's rate limit (Retry-After says when to retry)",
    502: "The model provider failed",
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemDetail, "description": text} for status, text in ERROR_STATUSES.items()
}


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    auth: Literal["open", "keys"]
    jobs_worker: bool


class TreeSummary(BaseModel):
    name: str
    kind: str
    root_id: str | None
    documents: int
    nodes: int
    leaves: int
    depth: int
    model: str
    created: str
    updated: str


class NodeBrief(BaseModel):
    id: str
    kind: str
    level: int
    title: str
    summary: str
    children: int
    spans: list[Span]


class NodeView(BaseModel):
    tree: str
    id: str
    kind: str
    level: int
    meta: NodeMeta
    text: str
    spans: list[Span]
    parent: str | None
    children: list[NodeBrief]


class OutlineNode(BaseModel):
    id: str
    kind: str
    title: str
    summary: str
    spans: list[Span]
    children: list[OutlineNode] = Field(default_factory=list)
    more: int = 0  # children not shown (depth limit)


class Outline(BaseModel):
    tree: TreeSummary
    root: OutlineNode | None


class SearchHit(BaseModel):
    node_id: str
    score: float
    title: str
    summary: str
    spans: list[Span]


class SearchResult(BaseModel):
    tree: str
    query: str
    hits: list[SearchHit]


class AskRequest(Strict):
    question: str = Field(..., min_length=1, max_length=4000)
    mode: Literal["auto", "walk", "search", "retrieve", "nav", "tree", "agent"] | None = Field(
        None,
        description="how the question runs, as on the CLI: auto | walk | search | retrieve (the tree as an"
        " index, one answer call) | nav (score-guided navigation); default: the server's ask_mode setting."
        " For memories, tree | agent is still read as the navigator",
    )
    navigator: Literal["tree", "agent"] | None = Field(
        None,
        description="conversation memories: walk the memory (tree: the topic walk, or the tool-using agent)"
        " instead of reading it through its index (auto, retrieve)",
    )
    strategy: Literal["auto", "describe", "metadata", "semantic"] | None = Field(
        None, description="collections: how documents are picked"
    )
    budget_tokens: int | None = Field(None, ge=100, le=100_000, description="tokens of text to read")
    max_branch_attempts: int | None = Field(None, ge=1, le=20)
    leaves_per_branch: int | None = Field(None, ge=1, le=20)
    stream: bool = Field(False, description="answer as Server-Sent Events: step… token… answer")


class RetrieveRequest(Strict):
    question: str = Field(..., min_length=1, max_length=4000)
    budget_tokens: int = Field(1000, ge=50, le=100_000)
    use_model: bool = Field(
        False, description="memories: walk the tree with the model (else hybrid search, no model call)"
    )


class RetrieveResult(BaseModel):
    tree: str
    question: str
    method: str
    evidence: list[Evidence]


class MessageIn(Strict):
    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(..., max_length=200_000)
    name: str | None = Field(None, max_length=200)
    timestamp: str | None = Field(None, max_length=64)
    id: str | None = Field(
        None, min_length=1, max_length=200,
        description="your id for the message: a message whose id the memory holds already is skipped",
    )


class AddMessages(Strict):
    messages: list[MessageIn] = Field(..., min_length=1, max_length=5000)
    batch_size: int | None = Field(None, ge=1, le=100)
    background: bool = Field(False, description="run as a background job (returns the job)")
    idempotency_key: str | None = Field(
        None, min_length=1, max_length=255,
        description="the same key again means the same request again (as the Idempotency-Key header):"
        " its messages already stored are skipped, and a background add returns the job queued with it",
    )


class CreateMemory(AddMessages):
    name: str = Field(..., pattern=TREE_NAME)
    messages: list[MessageIn] = Field(default_factory=list, max_length=5000)  # type: ignore[assignment]


class AddReportOut(BaseModel):
    memory: str
    added: int
    skipped: int
    messages: int
    nodes: int
    depth: int
    batches: int
    seconds: float
    usage: dict[str, Any]


class Message(BaseModel):
    position: int
    role: str
    name: str | None = None
    content: str
    timestamp: str | None = None
    session: str | None = None
    node_id: str | None = None
    id: str | None = Field(None, description="the message's id as the client gave it")


class MessageDeleted(BaseModel):
    memory: str
    position: int = Field(..., description="the deleted message's position (never given out again)")
    messages: int = Field(..., description="messages the memory holds now; the others kept their positions")
    removed: list[str] = Field(..., description="node ids removed: the message's leaf, then emptied topics")
    refreshed: list[str] = Field(..., description="node ids whose summaries were written again")
    usage: dict[str, Any]
    seconds: float


class Messages(BaseModel):
    memory: str
    messages: list[Message]


class BuildRequest(Strict):
    paths: list[str] = Field(..., min_length=1, max_length=1000, description="server-side files or directories")
    add: bool = Field(False, description="keep the documents already in the tree (a collection grows)")
    meta: dict[str, str] | None = Field(None, description="metadata for every document (company, year...)")


class EnrichRequest(Strict):
    leaves: bool | None = Field(
        None, description="summarize every leaf too (default: yes; memories: no, one summary per run of messages)"
    )
    root: bool = Field(True, description="summarize the root too")
    force: bool = Field(False, description="summarize again the nodes that already have a summary")


class JobOut(BaseModel):
    id: str
    kind: str
    tree: str
    state: Literal["queued", "running", "done", "failed", "cancelled"]
    progress: dict[str, Any]
    report: dict[str, Any] | None
    error: str | None
    cancel_requested: bool
    attempts: int
    created: str
    updated: str


class LedgerRun(BaseModel):
    id: str
    kind: str
    tree: str | None
    detail: str
    status: str
    started: str
    finished: str | None
    usage: dict[str, Any]


class Deleted(BaseModel):
    deleted: str


AnswerOut = Answer
