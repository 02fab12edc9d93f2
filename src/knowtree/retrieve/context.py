"""Contextual index entries: every node of a tree as text to search, with where it sits.

A leaf read alone loses what its position says: which document, which section, which pages, which
session and who spoke. Anthropic's Contextual Retrieval showed that prepending that context before
indexing cuts retrieval failures by a third (dense) to a half (dense + BM25). knowtree's trees
already hold the context, so it costs no model call: titles and breadcrumbs, page ranges, message
times and speakers, and (when a leaf was summarized) its own summary. Ancestors' summaries are not
copied into the pieces: they are in the ancestors' own entries, whose scores reach the pieces below
through the tree's priors (`treescore`).

Leaves are long (a chunk is ~5,000 characters, a section up to 6,000) while a question's evidence is
a sentence or a table row, so each leaf is cut into **pieces** of about `piece_chars` characters on
line and sentence boundaries; a piece is the unit that is ranked and packed into a token budget, and
its leaf becomes its parent (a piece borrows its leaf's and sections' scores in `treescore`).
Inner nodes are entries of their own: title, breadcrumb, summary and the other metadata fields, and,
for a small subtree, the text of its leaves (summarized or not: the metadata alone of a run of
turns ranked worse than its words; RESULTS.md, "Summarized vs zero-call tree").

Every entry has a content hash over what is indexed, so an update re-indexes only entries whose
text or context changed (`treeindex`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from knowtree.types import Node, content_hash

PIECE_CHARS = 400  # measured on FinanceBench pages (RESULTS.md "Tree as an index")
ENTRY_FORMAT = "3"  # bump when `tree_entries` derives different entries from the same nodes (re-derives all)
INNER_TEXT_CHARS = 20000  # an inner node is indexed with its metadata and its leaves' text up to this
SUMMARY_CHARS = 300  # a leaf's own summary prepended to its pieces' context is cut to this

# a sentence end: its punctuation and the spaces after it (a match ends where the next sentence
# starts; matching the punctuation instead of looking behind for it is ~2.5x faster, same ends)
_SENTENCE = re.compile(r"[.!?]\s+(?=[A-Z0-9\"'(\[])")
_ESCAPE = json.encoder.encode_basestring_ascii  # json.dumps' own (C) string escaping


@dataclass(slots=True)
class Entry:
    """One row of a tree's index: a piece of a leaf (`leaf=True`) or an inner node (or a whole leaf)."""

    id: str  # pieces: "<leaf id>:<n>"; nodes: the node id
    node: str  # the node this entry comes from
    parent: str | None  # the tree parent for scoring (a piece's parent is its leaf)
    leaf: bool  # True for pieces: the units that are ranked and packed
    order: int  # document order among pieces
    text: str  # what is shown as evidence (pieces) or the node's own text (inner)
    context: str  # what is prepended for indexing
    cite: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # for a leaf's entries: the key of what they were derived from (`Reuse`)

    @property
    def body(self) -> str:
        return f"{self.context}\n{self.text}" if self.context else self.text

    @property
    def body_hash(self) -> str:
        """What is indexed and embedded: a vector is reused while this stays the same."""
        return content_hash("body", self.body)

    def row_hash(self, body_hash: str) -> str:
        """The whole row: its place in the tree too (a moved piece is rewritten, not re-embedded)."""
        return row_hash(self.parent, body_hash, self.order, self.leaf)

    @property
    def tokens(self) -> int:
        return math.ceil(len(self.text) / 4)


def body_hashes(entries: Sequence[Entry]) -> list[str]:
    """Each entry's `Entry.body_hash`, the pieces of a leaf sharing the hash of their common context
    (hashed once, then copied): the context is most of an index's text."""
    started: dict[str, Any] = {}
    out = []
    for e in entries:
        if e.context:
            h = started.get(e.context)
            if h is None:
                h = started[e.context] = hashlib.sha256(f"body\x00{e.context}\n".encode())
            h = h.copy()
            h.update(f"{e.text}\x00".encode())
        else:
            h = hashlib.sha256(f"body\x00{e.text}\x00".encode())
        out.append(h.hexdigest()[:16])
    return out


def cite_json(cite: dict[str, Any]) -> str:
    """`json.dumps(cite)`, byte for byte, built directly for the usual citation (str keys; str and int
    values): an index of a large corpus serializes one per entry."""
    parts = []
    for key, value in cite.items():
        kind = type(value)
        if type(key) is not str or (kind is not str and kind is not int):
            return json.dumps(cite)
        parts.append(f"{_ESCAPE(key)}: {_ESCAPE(value) if kind is str else int.__repr__(value)}")
    return "{" + ", ".join(parts) + "}"


def row_hash(parent: str | None, body_hash: str, order: int, leaf: bool) -> str:
    """An index row's hash: what it indexes (`body_hash`) and where it sits."""
    return content_hash("entry", parent or "", body_hash, str(order), str(leaf))


def split_pieces(text: str, max_chars: int = PIECE_CHARS) -> list[tuple[int, str]]:
    """(offset, piece) for consecutive pieces of `text`, each about `max_chars` or less, cut at line
    ends, else sentence ends, else spaces. Pieces cover the text (blank pieces are dropped)."""
    if len(text) <= max_chars:  # one piece (what the loops below make of it)
        return [(0, text)] if text.strip() else []
    units: list[tuple[int, str]] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        if len(line) <= max_chars:
            units.append((pos, line))
        else:
            start = 0
            for part in _split_long(line, max_chars):
                units.append((pos + start, part))
                start += len(part)
        pos += len(line)
    pieces: list[tuple[int, str]] = []
    cur_start, cur = 0, ""
    for offset, unit in units:
        if cur and len(cur) + len(unit) > max_chars:
            pieces.append((cur_start, cur))
            cur = ""
        if not cur:
            cur_start = offset
        cur += unit
    if cur:
        pieces.append((cur_start, cur))
    return [(o, p) for o, p in pieces if p.strip()]


def _split_long(line: str, max_chars: int) -> list[str]:
    parts: list[str] = []
    last = 0
    for m in _SENTENCE.finditer(line):
        parts.append(line[last : m.end()])
        last = m.end()
    parts.append(line[last:])
    out: list[str] = []
    for p in parts:
        while len(p) > max_chars * 2:  # no sentence end: cut at a space
            cut = p.rfind(" ", 0, max_chars)
            cut = cut if cut > 0 else max_chars
            out.append(p[:cut])
            p = p[cut:]
        out.append(p)
    merged: list[str] = []
    for p in out:
        if merged and len(merged[-1]) + len(p) <= max_chars:
            merged[-1] += p
        else:
            merged.append(p)
    return [p for p in merged if p]


def _meta_text(node: Node) -> str:
    m = node.meta
    fields = [m.summary, *m.decisions, *m.critical_actions, *m.noteworthy_events]
    if m.about:
        fields.append("About: " + ", ".join(m.about))
    return "\n".join(f for f in fields if f)


def _where(node: Node) -> str:
    """Pages, or the span of lines / messages, or the times of a conversation node."""
    parts = []
    if node.spans:
        s, e = node.spans[0], node.spans[-1]
        if s.page_start is not None:
            end = e.page_end or s.page_start
            parts.append(f"page {s.page_start}" if end == s.page_start else f"pages {s.page_start}-{end}")
    t = node.meta.time_range
    if t:
        parts.append(t[0] if len(t) == 1 or t[0] == t[-1] else f"{t[0]} to {t[-1]}")
    return ", ".join(parts)


#: reuse(node id, parent, order of its first piece, trail key) -> (pieces, text) when the node is a
#: leaf whose entries are already indexed exactly as they would be derived here, else None. The
#: trail key joins what the leaf's context takes from its ancestors (titles, document lines).
Reuse = Callable[[str, str | None, int, str], tuple[int, str] | None]


def tree_entries(
    nodes: Mapping[str, Node],
    root_id: str,
    *,
    piece_chars: int = PIECE_CHARS,
    doc_context: dict[str, str] | None = None,
    reuse: Reuse | None = None,
    sources: Mapping[str, str] | None = None,
) -> list[Entry]:
    """The index entries of a tree: pieces of every leaf (in document order) and every inner node.

    `doc_context` maps a document node id (or a file path) to a line of metadata about it (company,
    year, type, description), prepended to the context of everything below it.
    `reuse`: asked before each node is read; a leaf it answers for adds no entry (its entries are
    kept as indexed) and is never read from `nodes`, so a lazy mapping parses only what changed.
    `sources`: the key stamped on each derived leaf's entries (`Entry.source`), by node id.
    """
    doc_context = doc_context or {}
    entries: list[Entry] = []
    order = 0
    root = nodes[root_id]

    def view(trail: list[Node]) -> tuple[list[str], list[str], str]:
        """What a node's context takes from its ancestors, and all of it as one key (for `reuse`).

        Ancestors give a piece where it is: titles, document lines, dates. Not their summaries: a
        summary belongs to the ancestor's own entry (whose score reaches the piece through the
        tree's priors); copied into every piece below it, 300-character summaries outweighed a
        turn's own words in BM25's length normalization (RESULTS.md, "Summarized vs zero-call tree")."""
        crumbs = [a.meta.title for a in trail if a.meta.title]
        extra = [doc_context[a.id] for a in trail if a.id in doc_context]
        return crumbs, extra, "\x1d".join("\x1e".join(x) for x in (crumbs, extra))

    def visit(
        node_id: str,
        parent: str | None,
        trail: list[Node],
        above: tuple[list[str], list[str], str],
    ) -> list[str]:
        """Add the entries under `node_id`; returns the texts of its leaves (for small subtrees)."""
        nonlocal order
        crumbs, extra, trail_key = above  # shared by siblings: never changed here
        if reuse is not None:
            kept = reuse(node_id, parent, order, trail_key)
            if kept is not None:
                order += kept[0]
                return [kept[1]]
        node = nodes[node_id]
        if node.spans and node.spans[0].file in doc_context and not extra:
            extra = [doc_context[node.spans[0].file]]
        if node.is_leaf:
            source = (sources or {}).get(node_id, "")
            where = _where(node)
            file = node.spans[0].file if node.spans else ""
            own = [node.meta.title] if node.meta.title and node.meta.title not in crumbs else []
            context_lines = [
                *extra,
                " > ".join([*crumbs, *own]) or file,
                where,
                node.meta.summary[:SUMMARY_CHARS] if node.meta.summary else "",
            ]
            context = "\n".join(c for c in context_lines if c)
            span = node.spans[0] if node.spans else None
            pieces = split_pieces(node.text, piece_chars) or [(0, node.text)]
            single = len(pieces) == 1  # a short leaf (a message, a paragraph) is its own piece
            for n, (offset, piece) in enumerate(pieces):
                cite: dict[str, Any] = {"node_id": node.id, "file": file}
                if span is not None:
                    before = node.text.count("\n", 0, offset)
                    cite["line_start"] = span.line_start + before
                    cite["line_end"] = span.line_start + before + piece.rstrip("\n").count("\n")
                    if span.page_start is not None:  # the piece's own pages: a form feed starts a page
                        body = piece.strip()
                        a = offset + (piece.index(body) if body else 0)
                        first = span.page_start + node.text.count("\f", 0, a)
                        last = span.page_start + node.text.count("\f", 0, a + len(body))
                        end = node.spans[-1].page_end or span.page_start
                        cite["page_start"], cite["page_end"] = min(first, end), min(max(first, last), end)
                    if span.line_start == span.line_end and span.end == span.start + 1:  # a message
                        cite["line_start"] = cite["line_end"] = span.line_start
                if node.meta.time_range:
                    cite["timestamp"] = node.meta.time_range[0]
                entries.append(
                    Entry(
                        id=f"{node.id}:{n}",
                        node=node.id,
                        parent=parent if single else node.id,
                        leaf=True,
                        order=order,
                        text=piece,
                        context=context,
                        cite=cite,
                        source=source,
                    )
                )
                order += 1
            if single:
                return [node.text]
            # a leaf of several pieces is an entry too, by its metadata (its text is in its pieces:
            # indexing it again would double the index for no measured gain)
            whole = _meta_text(node)
            entries.append(
                Entry(
                    id=node.id,
                    node=node.id,
                    parent=parent,
                    leaf=False,
                    order=-1,
                    text=whole,
                    context=context,
                    source=source,
                )
            )
            return [node.text]
        texts: list[str] = []
        below = [*trail, node]
        below_view = view(below)
        for child in node.children:
            texts.extend(visit(child, node_id, below, below_view))
        meta = _meta_text(node)
        body_text = meta
        if node_id != root_id:  # summarized or not: its metadata alone ranked below the zero-call tree
            joined = "\n".join(texts)
            if len(joined) <= INNER_TEXT_CHARS:
                body_text = "\n".join(x for x in (meta, joined) if x)
        label = node.meta.title  # an untitled node's summary is its body already
        context = "\n".join(
            c for c in (*extra, " > ".join([*crumbs, label] if label else crumbs), _where(node)) if c
        )
        entries.append(
            Entry(
                id=node_id, node=node_id, parent=parent, leaf=False, order=-1, text=body_text, context=context
            )
        )
        return texts

    visit(root.id, None, [], view([]))
    return entries
