"""The data model: what flows through ingest → chunk → build → store → navigate → answer."""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


def content_hash(*parts: str, length: int = 16) -> str:
    """A stable id from content: the same inputs always give the same id (sha256 of every part
    followed by a NUL byte, hashed in one piece)."""
    data = ("\x00".join(parts) + "\x00").encode("utf-8") if parts else b""
    return hashlib.sha256(data).hexdigest()[:length]


class Document(BaseModel):
    """One input file, decoded to text."""

    model_config = ConfigDict(frozen=True)

    path: str  # as the user named it (relative paths stay relative: citations read naturally)
    text: str
    encoding: str = "utf-8"
    sha256: str

    @property
    def id(self) -> str:
        return content_hash("doc", self.path, self.sha256)


class Span(BaseModel):
    """Where a piece of text lives in its source file."""

    model_config = ConfigDict(frozen=True)

    file: str
    start: int  # character offsets into the decoded text, end exclusive
    end: int
    line_start: int  # 1-based, inclusive
    line_end: int
    # physical pages (1-based, inclusive) for paged sources such as PDFs; None for plain text
    page_start: int | None = None
    page_end: int | None = None


class Chunk(BaseModel):
    model_config = ConfigDict(frozen=True)

    doc_path: str
    index: int  # position in the document
    text: str
    span: Span


class NodeKind(StrEnum):
    LEAF = "leaf"
    BRANCH = "branch"
    ROOT = "root"


class NodeMeta(BaseModel):
    """The six structured metadata fields every node carries."""

    summary: str = ""
    title: str = ""  # the section heading, for trees built from a document's own structure
    # conversation memories: [first, last] message time (ISO 8601) of a topic or message
    time_range: list[str] = Field(default_factory=list)
    content_types: list[str] = Field(default_factory=list)
    critical_actions: list[str] = Field(default_factory=list)
    decisions: list[str] = Field(default_factory=list)
    noteworthy_events: list[str] = Field(default_factory=list)
    about: list[str] = Field(default_factory=list)
    # content types the model used that are not in the taxonomy (kept, and flagged here)
    unlisted_types: list[str] = Field(default_factory=list)
    # set when the model's reply stayed invalid and the metadata was derived without it
    fallback: str | None = None


class Node(BaseModel):
    id: str
    kind: NodeKind
    level: int  # 0 for leaves, growing towards the root
    meta: NodeMeta
    children: list[str] = Field(default_factory=list)
    text: str = ""  # raw chunk text, leaves only
    spans: list[Span] = Field(default_factory=list)  # leaves: one; inner nodes: the union of their leaves

    @property
    def is_leaf(self) -> bool:
        return self.kind is NodeKind.LEAF


class Usage(BaseModel):
    """Token and call accounting; `calls` counts real model calls, `cached` those answered by the cache."""

    calls: int = 0
    cached: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    cached_input_tokens: int = 0  # tokens the cached calls took when they were first made
    cached_output_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.cached += other.cached
        self.cached_input_tokens += other.cached_input_tokens
        self.cached_output_tokens += other.cached_output_tokens
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost_usd += other.cost_usd
        self.seconds += other.seconds


class Citation(BaseModel):
    file: str
    line_start: int
    line_end: int
    node_id: str
    quote: str = ""  # verified evidence from that leaf, when there is some
    page_start: int | None = None  # physical pages, for paged sources (PDF)
    page_end: int | None = None
    # conversation memories: line_start/line_end are 1-based message positions; who spoke and when
    speaker: str | None = None
    timestamp: str | None = None
    message_id: str | None = None  # the source's own id (LoCoMo dia_id)
    # conversation memories: the cited passage's characters in the message's content, [start, end)
    char_start: int | None = None
    char_end: int | None = None


AnswerStatus = Literal["complete", "partial", "none"]


class NavStep(BaseModel):
    """One step of a navigation: what was shown, what was chosen, why, and what it cost."""

    action: Literal["decompose", "choose", "read", "combine", "backtrack", "exhausted"]
    node_id: str | None = None
    source: str | None = None  # where the node's text lives: "file:first-last line" (a leaf read)
    breadcrumb: list[str] = Field(default_factory=list)
    options: list[str] = Field(default_factory=list)  # child ids shown
    choice: str | None = None
    reason: str = ""
    outcome: str = ""
    error: str | None = None  # a malformed reply or fallback, recorded instead of hidden
    tokens: int = 0
    latency_s: float = 0.0
    cached: bool = False


class Answer(BaseModel):
    question: str
    answer: str | None
    status: AnswerStatus
    citations: list[Citation] = Field(default_factory=list)
    trace: list[NavStep] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    parts: list[dict[str, Any]] = Field(default_factory=list)  # per sub-question: answer, evidence, node


class TreeInfo(BaseModel):
    name: str
    root_id: str | None
    documents: int
    nodes: int
    leaves: int
    depth: int
    created: str
    updated: str
    model: str
    kind: str = "document"
