"""Plain records kept beside trees: what a structured document's build found (`DocInfo`), expert
notes, and the rows of a knowledge base. Data only; the store reads and writes them, the
construction and answering code passes them around. Imports nothing from knowtree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class DocInfo:
    path: str
    node_id: str
    description: str = ""
    meta: dict[str, str] = field(default_factory=dict)
    pages: int | None = None
    source: str = ""  # where the structure came from: outline, toc, llm, pages, headings, chunks


@dataclass
class ExpertNote:
    id: int
    scope: str
    text: str
    created: str


@dataclass
class KBRecord:
    name: str
    domain: str
    attributes: dict[str, Any]
    rules: list[dict[str, Any]]
    settings: dict[str, Any]
    model: str
    created: str = ""
    updated: str = ""


@dataclass
class KBRaw:
    id: str
    text: str
    timestamp: str | None = None
    cluster_id: str | None = None
    issue_id: str | None = None


@dataclass
class KBTheme:
    id: str
    name: str


@dataclass
class KBCluster:
    id: str
    theme_id: str | None
    seed_raw_id: str
    centroid: bytes  # float32 vector of the embedder the KB was built with
    size: int


@dataclass
class KBIssue:
    id: str
    kind: str  # "parent" | "child"
    parent: str | None
    cluster_id: str
    title: str
    metadata: dict[str, str]  # attribute → a value, or "any" (every value)
    position: int = 0
    solution: dict[str, Any] | None = None
    status: str = "pending"  # pending | ok | flagged | ungrounded
    compliance: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class KBChunk:
    id: str
    doc_id: str
    source: str
    path: list[str]
    text: str
    context: str

    @property
    def indexed_text(self) -> str:
        """What retrieval sees: the context, then the chunk (the seed concatenates both)."""
        return f"{self.context}\n{self.text}"
