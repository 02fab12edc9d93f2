"""PageIndex-style JSON: export a tree, import one.

Format (as PageIndex writes it): `{"doc_name", "doc_description", "structure": [node...]}` where a
node is `{"title", "node_id", "start_index", "end_index", "summary", "nodes": [...], "text"?}` and
start/end are physical pages (1-based, inclusive). Trees of unpaged sources (Markdown, DOCX, HTML,
text) export line numbers there instead, and say so in `"index": "line"`. A collection exports one
top-level node per document.

knowtree adds what a faithful round trip needs (other readers ignore it): every node's `"spans"`
(file, character and line range, pages) and its other metadata (`"meta"`), and the tree's `"root"`
(its node id, title, summary and spans). An import keeps the node ids it is given (a content hash
only where one is missing or repeated) and the spans, so `export` then `import` gives the same
tree: ids, spans, pages and texts.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import ValidationError

from knowtree.errors import InputError
from knowtree.types import Document, Node, NodeKind, NodeMeta, Span, content_hash

_OWN_META = ("title", "summary")  # exported as PageIndex's own fields


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
            **_extras(n),
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
    out: dict[str, Any] = {
        "doc_name": doc_name,
        "doc_description": descriptions.get(doc_name, ""),
        "index": "page" if kinds == {"page"} else ("line" if kinds == {"line"} else "mixed"),
        "structure": structure,
    }
    if root.children:  # the root is not one of the structure's nodes: its own record
        out["root"] = {"node_id": root_id, "title": root.meta.title, "summary": root.meta.summary, **_extras(root)}
    return out


def _extras(n: Node) -> dict[str, Any]:
    """knowtree's additions to a node: its spans and the metadata PageIndex has no field for (its
    title too when it has none: PageIndex's "title" then shows the summary's opening or the id)."""
    meta = n.meta.model_dump(exclude=set(_OWN_META), exclude_defaults=True)
    if not n.meta.title:
        meta["title"] = ""
    return {"spans": [s.model_dump() for s in n.spans], **({"meta": meta} if meta else {})}


def import_tree(data: Any, source: str) -> tuple[list[Node], str, list[Document]]:
    """Nodes (the ids given kept; a content hash where one is missing or repeated), the root id and
    one document per file the spans name."""
    if isinstance(data, list):
        data = {"structure": data}
    if not isinstance(data, dict) or not isinstance(data.get("structure"), list) or not data["structure"]:
        raise InputError(source, "not PageIndex JSON (expected a non-empty 'structure' list)")
    doc_name = str(data.get("doc_name") or source)
    paged = data.get("index", "page") != "line"
    nodes: list[Node] = []
    texts: list[str] = []
    used: set[str] = set()

    def keep_id(item: dict[str, Any], computed: str) -> str:
        given = item.get("node_id")
        nid = given if isinstance(given, str) and given.strip() and given not in used else computed
        if nid in used:  # a repeated content hash (two identical leaves)
            nid = content_hash(nid, str(len(used)))
        used.add(nid)
        return nid

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
        meta = _meta(item, title, summary, source)
        text = str(item.get("text") or "") if not kids else ""
        spans = _spans(item, title, source) or [
            Span(
                file=doc_name,
                start=0,
                end=len(text),
                line_start=start if not paged else 0,
                line_end=end if not paged else 0,
                page_start=start if paged else None,
                page_end=end if paged else None,
            )
        ]
        if kids:
            child_ids = [k for k, _ in kids]
            nid = keep_id(item, content_hash("import", doc_name, title, str(start), str(end), *child_ids))
            level = 1 + max(lv for _, lv in kids)
            nodes.append(
                Node(id=nid, kind=NodeKind.BRANCH, level=level, meta=meta, children=child_ids, spans=spans)
            )
            return nid, level
        nid = keep_id(item, content_hash("import", doc_name, title, str(start), str(end), text or summary))
        texts.append(text or summary)
        nodes.append(Node(id=nid, kind=NodeKind.LEAF, level=0, meta=meta, text=text or summary, spans=spans))
        return nid, 0

    tops = [make(item, 0) for item in data["structure"]]
    top_ids = [t for t, _ in tops]
    root = data.get("root") if isinstance(data.get("root"), dict) else {}
    starts = [n.spans[0] for n in nodes if n.id in top_ids]
    root_spans = _spans(root, "root", source) or [
        Span(
            file=doc_name,
            start=0,
            end=0,
            line_start=min((s.line_start for s in starts), default=0),
            line_end=max((s.line_end for s in starts), default=0),
            page_start=min((s.page_start for s in starts if s.page_start is not None), default=None),
            page_end=max((s.page_end for s in starts if s.page_end is not None), default=None),
        )
    ]
    root_title = str(root["title"]) if "title" in root else doc_name
    root_summary = str(root["summary"] or "") if "summary" in root else str(data.get("doc_description") or "")
    root_id = keep_id(root, content_hash("doc", doc_name, *top_ids))
    nodes.append(
        Node(
            id=root_id,
            kind=NodeKind.ROOT,
            level=1 + max(lv for _, lv in tops),
            meta=_meta(root, root_title, root_summary, source),
            children=top_ids,
            spans=root_spans,
        )
    )
    return nodes, root_id, _documents(nodes, doc_name, texts)


def _spans(item: dict[str, Any], title: str, source: str) -> list[Span]:
    """The spans knowtree exported with a node (none: derived from start/end_index by the caller)."""
    raw = item.get("spans")
    if not raw:
        return []
    if not isinstance(raw, list):
        raise InputError(source, f"node {title!r}: 'spans' must be a list")
    try:
        return [Span.model_validate(s) for s in raw]
    except ValidationError as exc:
        raise InputError(source, f"node {title!r}: a bad span ({_first_error(exc)})") from exc


def _meta(item: dict[str, Any], title: str, summary: str, source: str) -> NodeMeta:
    extra = item.get("meta")
    if not isinstance(extra, dict):
        return NodeMeta(title=title, summary=summary)
    try:
        return NodeMeta.model_validate({"title": title, **extra, "summary": summary})
    except ValidationError as exc:
        raise InputError(source, f"node {title!r}: bad 'meta' ({_first_error(exc)})") from exc


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    return f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}"[:160]


def _documents(nodes: list[Node], doc_name: str, texts: list[str]) -> list[Document]:
    """One document per file the leaves' spans name, its text rebuilt from the leaves placed at
    their offsets (what lies between two leaves, whitespace in a structure tree, becomes blanks);
    without usable spans, the leaves' texts one after another under `doc_name`."""
    by_file: dict[str, list[Node]] = {}
    for n in nodes:
        if n.is_leaf and n.spans and n.spans[0].end - n.spans[0].start == len(n.text) and n.text:
            by_file.setdefault(n.spans[0].file, []).append(n)
    placed = sum(len(v) for v in by_file.values())
    if not by_file or placed < sum(1 for n in nodes if n.is_leaf):
        text = "\n\n".join(texts)
        return [_document(doc_name, text or doc_name)]
    docs = []
    for path, leaves in by_file.items():
        chars = [" "] * max(n.spans[0].end for n in leaves)
        for n in leaves:
            chars[n.spans[0].start : n.spans[0].end] = n.text
        docs.append(_document(path, "".join(chars)))
    return docs


def _document(path: str, text: str) -> Document:
    return Document(path=path, text=text, sha256=hashlib.sha256(text.encode()).hexdigest())


def document_nodes(nodes: list[Node], root_id: str, docs: list[Document]) -> list[tuple[str, str]]:
    """(path, node id) of each imported document: the root for one document; for several, the
    root's children that each hold one file (a collection's document nodes)."""
    if len(docs) == 1:
        return [(docs[0].path, root_id)]
    by_id = {n.id: n for n in nodes}
    out = []
    for c in by_id[root_id].children:
        files = {s.file for s in by_id[c].spans}
        if len(files) == 1:
            out.append((files.pop(), c))
    return out if len(out) == len(docs) else [(d.path, root_id) for d in docs[:1]]


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)
