"""PageIndex-style JSON: export a tree, import one.

Format (as PageIndex writes it): `{"doc_name", "doc_description", "structure": [node...]}` where a
node is `{"title", "node_id", "start_index", "end_index", "summary", "nodes": [...], "text"?}` and
start/end are physical pages (1-based, inclusive). Trees of unpaged sources (Markdown, DOCX, HTML,
text) export line numbers there instead, and say so in `"index": "line"`. A collection exports one
top-level node per document.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from knowtree.errors import InputError
from knowtree.types import Document, Node, NodeKind, NodeMeta, Span, content_hash


def _range(node: Node) -> tuple[int, int, str]:
    pages = [s for s in node.spans if s.page_start is not None and s.page_end is not None]
    if pages:
        return min(s.page_start for s in pages), max(s.page_end for s in pages), "page"  # type: ignore[type-var]
    if node.spans:
        return min(s.line_start for s in node.spans), max(s.line_end for s in node.spans), "line"
    return 0, 0, "line"


def export_tree(
    nodes: dict[str, Node],
    root_id: str,
    *,
    name: str,
    descriptions: dict[str, str] | None = None,
    with_text: bool = True,
) -> dict[str, Any]:
    kinds: set[str] = set()

    def node_json(nid: str) -> dict[str, Any]:
        n = nodes[nid]
        start, end, kind = _range(n)
        kinds.add(kind)
        out: dict[str, Any] = {
            "title": n.meta.title or " ".join(n.meta.summary.split())[:80] or nid,
            "node_id": nid,
            "start_index": int(start),
            "end_index": int(end),
            "summary": n.meta.summary,
        }
        if n.is_leaf and with_text:
            out["text"] = n.text
        if n.children:
            out["nodes"] = [node_json(c) for c in n.children]
        return out

    root = nodes[root_id]
    descriptions = descriptions or {}
    files = sorted({s.file for s in root.spans})
    if root.meta.title and len(files) > 1:  # a collection: one node per document
        structure = [node_json(c) for c in root.children]
        doc_name = name
    else:
        structure = [node_json(c) for c in root.children] if root.children else [node_json(root_id)]
        doc_name = files[0] if files else name
    return {
        "doc_name": doc_name,
        "doc_description": descriptions.get(doc_name, ""),
        "index": "page" if kinds == {"page"} else ("line" if kinds == {"line"} else "mixed"),
        "structure": structure,
    }


def import_tree(data: Any, source: str) -> tuple[list[Node], str, list[Document]]:
    """Nodes (ids recomputed from content), the root id and one document per imported file."""
    if isinstance(data, list):
        data = {"structure": data}
    if not isinstance(data, dict) or not isinstance(data.get("structure"), list) or not data["structure"]:
        raise InputError(source, "not PageIndex JSON (expected a non-empty 'structure' list)")
    doc_name = str(data.get("doc_name") or source)
    paged = data.get("index", "page") != "line"
    nodes: list[Node] = []
    texts: list[str] = []

    def make(item: Any, depth: int) -> tuple[str, int]:
        if not isinstance(item, dict) or "title" not in item:
            raise InputError(source, f"a node without a title at depth {depth}")
        try:
            start = int(item.get("start_index", item.get("line_num", 0)) or 0)
            end = int(item.get("end_index", start) or start)
        except (TypeError, ValueError) as exc:
            raise InputError(
                source, f"node {item.get('title')!r}: start_index/end_index must be integers"
            ) from exc
        kids = [make(c, depth + 1) for c in item.get("nodes") or []]
        title = " ".join(str(item["title"]).split())
        summary = str(item.get("summary") or item.get("prefix_summary") or "")
        text = str(item.get("text") or "") if not kids else ""
        span = Span(
            file=doc_name,
            start=0,
            end=len(text),
            line_start=start if not paged else 0,
            line_end=end if not paged else 0,
            page_start=start if paged else None,
            page_end=end if paged else None,
        )
        if kids:
            child_ids = [k for k, _ in kids]
            nid = content_hash("import", doc_name, title, str(start), str(end), *child_ids)
            level = 1 + max(lv for _, lv in kids)
            nodes.append(
                Node(
                    id=nid,
                    kind=NodeKind.BRANCH,
                    level=level,
                    meta=NodeMeta(title=title, summary=summary),
                    children=child_ids,
                    spans=[span],
                )
            )
            return nid, level
        nid = content_hash("import", doc_name, title, str(start), str(end), text or summary)
        texts.append(text or summary)
        nodes.append(
            Node(
                id=nid,
                kind=NodeKind.LEAF,
                level=0,
                meta=NodeMeta(title=title, summary=summary),
                text=text or summary,
                spans=[span],
            )
        )
        return nid, 0

    tops = [make(item, 0) for item in data["structure"]]
    top_ids = [t for t, _ in tops]
    starts = [n.spans[0] for n in nodes if n.id in top_ids]
    root_span = Span(
        file=doc_name,
        start=0,
        end=0,
        line_start=min((s.line_start for s in starts), default=0),
        line_end=max((s.line_end for s in starts), default=0),
        page_start=min((s.page_start for s in starts if s.page_start is not None), default=None),
        page_end=max((s.page_end for s in starts if s.page_end is not None), default=None),
    )
    root_id = content_hash("doc", doc_name, *top_ids)
    nodes.append(
        Node(
            id=root_id,
            kind=NodeKind.ROOT,
            level=1 + max(lv for _, lv in tops),
            meta=NodeMeta(title=doc_name, summary=str(data.get("doc_description") or "")),
            children=top_ids,
            spans=[root_span],
        )
    )
    text = "\n\n".join(texts)
    doc = Document(path=doc_name, text=text or doc_name, sha256=hashlib.sha256(text.encode()).hexdigest())
    return nodes, root_id, [doc]


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)
