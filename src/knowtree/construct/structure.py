"""Build a tree that follows each document's own structure (outline, TOC, headings).

Shape (planned before any model call, ids are content hashes):

* one node per section, children in reading order; a section's own text before its first
  subsection becomes an "(introduction)" leaf whatever its length, text before the first section a
  "(front matter)" leaf; a heading with nothing after it before its first subsection is read with
  that subsection (its line opens the subsection's first leaf), so every character of the document's
  text is in exactly one leaf;
* a section larger than the budget (`max_pages` physical pages or `max_chars` characters) is split
  recursively into parts, so no leaf exceeds it; a node with very many children gets intermediate
  groups, so a navigator is never shown more than `2 * max_children` options;
* one node per document (the root when there is only one document), a root over several.

Metadata: titles only is the fast path: titles and page ranges only, no model call at all.
Documents in `eager_paths` get the core engine's six fields for every leaf and synthesizes them for every inner
node (the same prompts as the chunk-based builder), so both navigation styles work on every tree.
Nodes whose id is unchanged since the last build keep their metadata (`reuse`), so re-ingesting an
edited document pays only for the changed sections and their ancestors.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain

from knowtree.construct.builder import BuildResult, Progress, balanced_groups
from knowtree.construct.metadata import extract_leaf, synthesize_branch
from knowtree.errors import ModelOutputError
from knowtree.ingest.chunk import chunk_document
from knowtree.ingest.structure import Section, StructuredDocument
from knowtree.llm.client import LLMClient
from knowtree.types import Document, Node, NodeKind, NodeMeta, Span, Usage, content_hash

META_CHARS = 6000  # a leaf's text shown to the metadata prompt is cut here


@dataclass
class StructureOptions:
    max_pages: int = 2
    max_chars: int = 6000
    max_children: int = 8
    taxonomy: Sequence[str] = ()
    # documents whose nodes get metadata now (the others: titles only, no model call)
    eager_paths: frozenset[str] = frozenset()


@dataclass
class _Plan:
    id: str
    kind: NodeKind
    title: str
    children: list[str] = field(default_factory=list)
    text: str = ""
    span: Span | None = None
    level: int = 0
    path: str = ""


@dataclass
class _Sec:
    title: str
    level: int
    start: int
    end: int
    body: int = -1  # where the text after the heading begins (-1: after the heading's line)
    kids: list[_Sec] = field(default_factory=list)


def _nest(sections: Sequence[Section], text_len: int) -> list[_Sec]:
    top: list[_Sec] = []
    stack: list[_Sec] = []
    for s in sorted(sections, key=lambda s: s.start):
        node = _Sec(s.title, s.level, s.start, s.end if s.end >= 0 else text_len, s.body)
        while stack and stack[-1].level >= node.level:
            stack.pop()
        (stack[-1].kids if stack else top).append(node)
        stack.append(node)

    # a section ends where its last descendant ends
    def close(n: _Sec) -> int:
        for k in n.kids:
            n.end = max(n.end, close(k))
        return n.end

    for n in top:
        close(n)
    return top


class _Planner:
    def __init__(self, sd: StructuredDocument, opts: StructureOptions) -> None:
        self.sd = sd
        self.doc: Document = sd.document
        self.text = sd.document.text
        self.opts = opts
        self.plans: list[_Plan] = []
        self.seen: set[str] = set()
        self.newlines = [i for i, ch in enumerate(self.text) if ch == "\n"]

    def span(self, start: int, end: int) -> Span:
        from bisect import bisect_left

        line_start = bisect_left(self.newlines, start) + 1
        line_end = bisect_left(self.newlines, max(start, end - 1)) + 1
        p0 = self.sd.page_of(start)
        p1 = self.sd.page_of(max(start, end - 1))
        return Span(
            file=self.doc.path,
            start=start,
            end=end,
            line_start=line_start,
            line_end=line_end,
            page_start=p0,
            page_end=max(p0, p1) if p0 is not None and p1 is not None else None,
        )

    def trimmed(self, start: int, end: int) -> tuple[int, int]:
        while start < end and self.text[start].isspace():
            start += 1
        while end > start and self.text[end - 1].isspace():
            end -= 1
        return start, end

    def leaf(self, title: str, start: int, end: int) -> str:
        text = self.text[start:end]
        leaf_id = content_hash("sleaf", self.doc.path, title, text)
        if leaf_id in self.seen:
            leaf_id = content_hash("sleaf", self.doc.path, title, text, str(start))
        self.seen.add(leaf_id)
        self.plans.append(
            _Plan(leaf_id, NodeKind.LEAF, title, text=text, span=self.span(start, end), path=self.doc.path)
        )
        return leaf_id

    def inner(self, title: str, children: list[str], kind: NodeKind = NodeKind.BRANCH) -> str:
        by_id = {p.id: p for p in self.plans}
        kids = [by_id[c] for c in children]
        node_id = content_hash("section", self.doc.path, title, *children)
        spans = [k.span for k in kids if k.span is not None]
        span = _union(spans)
        level = 1 + max(k.level for k in kids)
        self.plans.append(
            _Plan(node_id, kind, title, children=list(children), span=span, level=level, path=self.doc.path)
        )
        return node_id

    def pieces(self, start: int, end: int) -> list[tuple[int, int]]:
        """The range cut so that every piece fits the page and character budgets."""
        start, end = self.trimmed(start, end)
        if start >= end:
            return []
        out: list[tuple[int, int]] = []
        if self.sd.pages:
            p0 = self.sd.page_of(start) or 1
            p1 = self.sd.page_of(end - 1) or p0
            step = max(1, self.opts.max_pages)
            if p1 - p0 + 1 > step:
                for p in range(p0, p1 + 1, step):
                    s = max(start, self.sd.pages[p - 1][0])
                    e = min(end, self.sd.pages[min(p + step - 1, p1) - 1][1])
                    out.extend(self._by_chars(s, e))
                return out
        return self._by_chars(start, end)

    def _by_chars(self, start: int, end: int) -> list[tuple[int, int]]:
        start, end = self.trimmed(start, end)
        if start >= end:
            return []
        if end - start <= self.opts.max_chars:
            return [(start, end)]
        sub = Document(path=self.doc.path, text=self.text[start:end], sha256="-")
        return [
            (start + c.span.start, start + c.span.end)
            for c in chunk_document(sub, size=max(200, self.opts.max_chars))
        ]

    def ranged(self, title: str, start: int, end: int) -> list[str]:
        """Leaves for a range: one leaf, or a node holding its parts when it is over budget."""
        parts = self.pieces(start, end)
        if not parts:
            return []
        if len(parts) == 1:
            return [self.leaf(title, *parts[0])]
        ids = [
            self.leaf(f"{title} ({self._where(s, e, i, len(parts))})", s, e) for i, (s, e) in enumerate(parts)
        ]
        return [self.inner(title, self.grouped(title, ids))]

    def _where(self, s: int, e: int, i: int, n: int) -> str:
        p0, p1 = self.sd.page_of(s), self.sd.page_of(max(s, e - 1))
        if p0 is not None and p1 is not None:
            return f"part {i + 1}/{n}, p. {p0}" if p0 == p1 else f"part {i + 1}/{n}, pp. {p0}-{p1}"
        return f"part {i + 1}/{n}"

    def grouped(self, title: str, ids: list[str]) -> list[str]:
        """At most 2 * max_children children: longer lists get intermediate groups."""
        limit = 2 * self.opts.max_children
        while len(ids) > limit:
            by_id = {p.id: p for p in self.plans}
            groups = balanced_groups(ids, self.opts.max_children)
            ids = [
                self.inner(self._group_title(title, [by_id[i] for i in g]), g) if len(g) > 1 else g[0]
                for g in groups
            ]
        return ids

    @staticmethod
    def _group_title(title: str, kids: list[_Plan]) -> str:
        """Parts of one split section: the section's title with the parts' range; else first … last."""
        import re

        parts = [re.search(r"\(part (\d+)/(\d+)", k.title) for k in kids]
        if all(parts) and all(k.title.startswith(title) for k in kids):
            first, last = parts[0], parts[-1]
            return f"{title} (parts {first.group(1)}-{last.group(1)}/{first.group(2)})"  # type: ignore[union-attr]
        return f"{kids[0].title} … {kids[-1].title}"

    def body_start(self, sec: _Sec) -> int:
        """Where the text after a section's heading begins: the loader's word, else the next line."""
        if sec.body >= sec.start:
            return sec.body
        newline = self.text.find("\n", sec.start)
        return len(self.text) if newline < 0 else newline + 1

    def section(self, sec: _Sec, lead: int | None = None) -> list[str]:
        """The section's nodes. `lead`: where its first leaf begins when a parent's heading, with
        nothing after it, is read with this section (so no character of the text is left out)."""
        start = sec.start if lead is None else min(lead, sec.start)
        if not sec.kids:
            return self.ranged(sec.title, start, sec.end)
        ids: list[str] = []
        first = sec.kids[0].start
        kid_lead: int | None = None
        if self.text[self.body_start(sec) : first].strip():
            # the section's own opening text, however short, is a leaf of its own
            ids.extend(self.ranged(f"{sec.title} (introduction)", start, first))
        else:  # the heading line alone: it opens the first subsection's leaf
            kid_lead = start
        for i, k in enumerate(sec.kids):
            ids.extend(self.section(k, kid_lead if i == 0 else None))
        if not ids:
            return []
        return [self.inner(sec.title, self.grouped(sec.title, ids))]

    def document(self, title: str, kind: NodeKind) -> str:
        top = _nest(self.sd.sections, len(self.text))
        ids: list[str] = []
        first = top[0].start if top else len(self.text)
        ids.extend(self.ranged("(front matter)" if top else title, 0, first))
        for sec in top:
            ids.extend(self.section(sec))
        if not ids:
            ids = [self.leaf(title, 0, len(self.text))]
        children = self.grouped(title, ids)
        node_id = content_hash("doc", self.doc.path, *children)
        by_id = {p.id: p for p in self.plans}
        span = _union([by_id[c].span for c in children if by_id[c].span is not None])
        level = 1 + max(by_id[c].level for c in children)
        self.plans.append(
            _Plan(node_id, kind, title, children=children, span=span, level=level, path=self.doc.path)
        )
        return node_id


def _union(spans: Sequence[Span | None]) -> Span | None:
    spans = [s for s in spans if s is not None]
    if not spans:
        return None
    pages = [s for s in spans if s.page_start is not None]
    return Span(
        file=spans[0].file,
        start=min(s.start for s in spans),
        end=max(s.end for s in spans),
        line_start=min(s.line_start for s in spans),
        line_end=max(s.line_end for s in spans),
        page_start=min(s.page_start for s in pages) if pages else None,  # type: ignore[type-var]
        page_end=max(s.page_end for s in pages) if pages else None,  # type: ignore[type-var]
    )


def document_title(sd: StructuredDocument) -> str:
    import os

    return os.path.basename(sd.path)


def plan_structure(
    docs: Sequence[StructuredDocument], opts: StructureOptions
) -> tuple[list[_Plan], dict[str, str]]:
    """All nodes (children before parents) and each document's node id by path."""
    plans: list[_Plan] = []
    doc_nodes: dict[str, str] = {}
    for sd in docs:
        planner = _Planner(sd, opts)
        doc_nodes[sd.path] = planner.document(document_title(sd), NodeKind.BRANCH)
        plans.extend(planner.plans)
    return plans, doc_nodes


def finish_root(
    doc_ids: Sequence[str],
    nodes: dict[str, Node],
    client: LLMClient | None,
    *,
    eager: bool,
    reuse: dict[str, Node] | None = None,
) -> tuple[str, list[Node], Usage]:
    """The root over the document nodes: the document itself when there is one, else a collection
    node (metadata synthesized from the documents' when eager). Returns (root id, changed nodes, usage)."""
    if len(doc_ids) == 1:
        only = nodes[doc_ids[0]].model_copy(update={"kind": NodeKind.ROOT})
        return only.id, [only], Usage()
    changed = [nodes[i].model_copy(update={"kind": NodeKind.BRANCH}) for i in doc_ids]
    root_id = content_hash("collection", *doc_ids)
    title = f"{len(doc_ids)} documents"
    old = (reuse or {}).get(root_id)
    usage = Usage()
    if old is not None and (not eager or _reusable(old)):
        meta = old.meta
    elif eager and client is not None:
        try:
            meta, usage = synthesize_branch(client, [nodes[i].meta for i in doc_ids])
        except ModelOutputError as exc:
            meta = _fallback(" ".join(nodes[i].meta.summary for i in doc_ids), exc)
    else:
        meta = NodeMeta()
    spans = [s for i in doc_ids for s in nodes[i].spans]
    root = Node(
        id=root_id,
        kind=NodeKind.ROOT,
        level=1 + max(nodes[i].level for i in doc_ids),
        meta=meta.model_copy(update={"title": title}),
        children=list(doc_ids),
        spans=spans,
    )
    return root_id, [*changed, root], usage


def build_structure(
    docs: Sequence[StructuredDocument],
    client: LLMClient | None,
    opts: StructureOptions,
    *,
    reuse: dict[str, Node] | None = None,
    progress: Progress | None = None,
) -> tuple[BuildResult, dict[str, str]]:
    plans, doc_nodes = plan_structure(docs, opts)
    reuse = reuse or {}
    nodes: dict[str, Node] = {}
    usage = Usage()
    fallbacks = 0
    eager_paths = opts.eager_paths

    def is_eager(p: _Plan) -> bool:
        return p.path in eager_paths

    todo = [
        p
        for p in plans
        if is_eager(p) and not _reusable(reuse.get(p.id)) and (p.kind is NodeKind.LEAF or len(p.children) > 1)
    ]
    total, done = len(todo), 0

    def tick(stage: str) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(stage, done, total)

    if progress and total:
        progress("leaves", 0, total)

    def make(p: _Plan) -> tuple[Node, Usage, bool, bool]:
        old = reuse.get(p.id)
        eager = is_eager(p)
        used, failed, called = Usage(), False, False
        if old is not None and (not eager or _reusable(old)):
            meta = old.meta
        elif not eager:
            meta = None  # titled below, once
        elif p.kind is NodeKind.LEAF:
            called = True
            heading = p.title.split(" (")[0].lower()
            body = (p.text if heading in p.text[:300].lower() else f"{p.title}\n\n{p.text}")[:META_CHARS]
            assert client is not None
            try:
                meta, used = extract_leaf(client, body, opts.taxonomy)
            except ModelOutputError as exc:
                meta, failed = _fallback(p.text, exc), True
        else:
            kids = [nodes[c].meta for c in p.children]
            if len(kids) == 1:
                meta = kids[0]  # copied below, with its title
            else:
                called = True
                assert client is not None
                try:
                    meta, used = synthesize_branch(client, kids)
                except ModelOutputError as exc:
                    meta, failed = _fallback(" ".join(k.summary for k in kids), exc), True
        meta = NodeMeta(title=p.title) if meta is None else meta.model_copy(update={"title": p.title})
        node = Node(
            id=p.id,
            kind=p.kind,
            level=p.level,
            meta=meta,
            children=p.children,
            text=p.text,
            spans=[p.span] if p.span is not None else [],
        )
        return node, used, failed, called

    calls = {p.id for p in todo}
    levels: dict[int, list[_Plan]] = {}
    for p in plans:
        levels.setdefault(p.level, []).append(p)
    workers = client.concurrency if client is not None else 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for lvl in sorted(levels):
            stage = "leaves" if lvl == 0 else "branches"
            # a node that needs no model call is made here: through the pool, a future, a lock and a
            # thread switch apiece cost more than the node (~1/8 of a zero-call build's planning)
            quick = (make(p) for p in levels[lvl] if p.id not in calls)
            called_for = pool.map(make, [p for p in levels[lvl] if p.id in calls])  # submitted now
            for node, used, failed, called in chain(quick, called_for):
                nodes[node.id] = node
                usage.add(used)
                fallbacks += failed
                if called:
                    tick(stage)
    ordered = [nodes[p.id] for p in plans]
    return BuildResult(root_id="", nodes=ordered, usage=usage, fallbacks=fallbacks), doc_nodes


def _reusable(old: Node | None) -> bool:
    return old is not None and bool(old.meta.summary) and old.meta.fallback is None


def _fallback(text: str, exc: ModelOutputError) -> NodeMeta:
    opening = " ".join(text.split())[:400]
    return NodeMeta(summary=opening, fallback=f"metadata reply stayed invalid: {exc}"[:300])


def summarize_node(
    client: LLMClient, node: Node, nodes: dict[str, Node], taxonomy: Sequence[str]
) -> tuple[NodeMeta, Usage]:
    """Metadata for one node on demand (the lazy path): a leaf from its text, an inner node from the
    opening of the text below it, within the same budget as a leaf."""
    if node.is_leaf:
        body = node.text
    else:
        texts: list[str] = []
        stack = list(reversed(node.children))
        size = 0
        while stack and size < META_CHARS:
            n = nodes[stack.pop()]
            if n.is_leaf:
                texts.append(n.text[: META_CHARS // 3])
                size += len(texts[-1])
            else:
                stack.extend(reversed(n.children))
        body = "\n\n".join(texts)
    meta, used = extract_leaf(client, f"{node.meta.title}\n\n{body}"[:META_CHARS], taxonomy)
    return meta.model_copy(update={"title": node.meta.title}), used
