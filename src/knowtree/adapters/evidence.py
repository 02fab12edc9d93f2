"""Evidence for a question without an answer: what the HTTP `retrieve` route, the MCP `recall` tool
and the LangChain / LlamaIndex retrievers return.

A conversation memory gives its messages (`Memory.context`: a model-guided walk, or hybrid search
alone); a document tree gives `Tree.retrieve` when the library has it, else its best leaves by
lexical (FTS5 BM25) search, cut to the token budget. Every item carries a citation.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from knowtree.core import KnowTree
from knowtree.tree import Tree
from knowtree.types import Citation, Node

CHARS_PER_TOKEN = 4


class Evidence(BaseModel):
    """One piece of evidence: text to put in a prompt, with where it came from."""

    node_id: str
    text: str
    score: float | None = None
    via: str = Field(..., description="how it was found: tree (a walk), search (lexical), hybrid")
    citation: Citation


def retrieve(
    kt: KnowTree, tree: str | Tree, question: str, budget_tokens: int = 1000, *, use_model: bool = False
) -> tuple[str, list[Evidence]]:
    """(method, evidence) for `question` from the stored tree `tree` (a name or a loaded `Tree`),
    within `budget_tokens`."""
    t = kt.tree(tree) if isinstance(tree, str) else tree
    if t.info.kind == "conversation":
        rows = kt.memory(t.name).context(question, budget_tokens, use_model=use_model)
        return ("tree" if use_model else "hybrid"), [message_evidence(t.name, r) for r in rows]
    library = getattr(t, "retrieve", None)
    if callable(library):  # the tree index's own retrieval, when the library offers it
        found = [_from_library(t, item) for item in library(question, budget_tokens=budget_tokens)]
        # the library packs in document order; a retriever hands back the best evidence first
        return "tree", sorted(found, key=lambda e: -(e.score or 0.0))
    return "bm25", lexical(kt, t, question, budget_tokens)


def lexical(kt: KnowTree, t: Tree, question: str, budget_tokens: int) -> list[Evidence]:
    out: list[Evidence] = []
    left = budget_tokens * CHARS_PER_TOKEN
    for node_id, score in kt.store.search_nodes(t.name, question, 50):
        n = t.nodes.get(node_id)
        if n is None or not n.is_leaf or not n.text:
            continue
        text = n.text[:left]
        out.append(Evidence(node_id=n.id, text=text, score=score, via="search", citation=leaf_citation(n)))
        left -= len(text)
        if left <= 0:
            break
    return out


def leaf_citation(n: Node) -> Citation:
    s = n.spans[0] if n.spans else None
    return Citation(
        file=s.file if s else "",
        line_start=s.line_start if s else 0,
        line_end=s.line_end if s else 0,
        node_id=n.id,
        page_start=s.page_start if s else None,
        page_end=s.page_end if s else None,
    )


def message_evidence(memory: str, row: dict[str, Any]) -> Evidence:
    position = int(row["position"])
    node_id = str(row.get("node_id") or "")
    return Evidence(
        node_id=node_id,
        text=str(row.get("content") or ""),
        via=str(row.get("via") or "tree"),
        citation=Citation(
            file=memory.split(":", 1)[-1],
            line_start=position,
            line_end=position,
            node_id=node_id,
            speaker=str(row.get("name") or row.get("role") or "") or None,
            timestamp=str(row["timestamp"]) if row.get("timestamp") else None,
            message_id=str(row["source_id"]) if row.get("source_id") else None,
        ),
    )


def _from_library(t: Tree, item: Any) -> Evidence:
    """Evidence from `Tree.retrieve`: an object with a node id and text, maybe a score and citation."""
    node_id = str(getattr(item, "node_id", None) or getattr(item, "id", ""))
    node = t.nodes.get(node_id)
    citation = getattr(item, "citation", None) or (leaf_citation(node) if node is not None else None)
    return Evidence(
        node_id=node_id,
        text=str(getattr(item, "text", "") or (node.text if node else "")),
        score=getattr(item, "score", None),
        via="tree",
        citation=citation or Citation(file="", line_start=0, line_end=0, node_id=node_id),
    )
