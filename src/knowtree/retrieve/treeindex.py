"""A tree's contextual index in the store: built with the tree, updated by content hash, searched fast.

`sync_entries(conn, tree)` runs inside the store's save transaction (a hook on the store,
registered by `retrieve.indexcache.attach(store)`): it derives the contextual entries of the saved tree (`retrieve.context`),
compares their content hashes with what is indexed and rewrites only the entries that changed,
in the `tree_index` table and its FTS5 index (external content: BM25 with the porter stemmer over
`tree_index.body`, the same query building as `retrieve.bm25`). No model call: titles, pages, times
and summaries are already in the nodes. Incremental: a save whose node rows are those last indexed
(a content fingerprint) derives nothing, and a leaf whose inputs did not change is neither parsed
nor derived again (`retrieve.indexreuse`).

Vectors are per embedder (`tree_index_vec`, keyed by entry hash): `TreeIndex.vectors()` embeds the
entries that have no vector for the current hash, so an edit re-embeds only what changed.
`TreeIndex.search()` returns every entry's lexical and dense score for a question; `treescore`
turns them into ranked, packed evidence.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from knowtree.errors import StoreError
from knowtree.retrieve.bm25 import match_expression, query_terms
from knowtree.retrieve.context import (
    ENTRY_FORMAT,
    PIECE_CHARS,
    Entry,
    body_hashes,
    cite_json,
    row_hash,
    tree_entries,
)
from knowtree.retrieve.indexreuse import LeafReuse
from knowtree.store import dialect
from knowtree.store.rows import NODE_COLUMNS, in_batches
from knowtree.types import Node, content_hash

if TYPE_CHECKING:
    import numpy as np

    from knowtree.retrieve.embed import Embedder

T = TypeVar("T")
EMBED_CHARS = 2000  # an entry's text is embedded up to this many characters
PROBE = 64  # entries embedded to time an embedder before embedding a whole index


class IndexStore(Protocol):
    """What the index needs from a store: run a function on its connection, read-only or in a transaction."""

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...


@dataclass(slots=True)
class SyncReport:
    entries: int = 0
    written: int = 0  # entries added or whose text changed (indexed again)
    removed: int = 0
    moved: int = 0  # same text under a new parent or position: row updated, not re-indexed
    unchanged: bool = False  # the nodes were those last indexed: no entry derived, none written
    reused: int = 0  # entries of leaves whose inputs did not change: neither derived nor written


def _doc_context(conn: sqlite3.Connection, tree: str) -> dict[str, str]:
    """A line per document of a collection (its metadata and description), by node id and by path."""
    try:
        rows = conn.execute(
            "SELECT path, node_id, description, meta_json FROM doc_info WHERE tree = ?", (tree,)
        ).fetchall()
    except dialect.OperationalError:  # a database before the collections migration
        return {}
    out: dict[str, str] = {}
    for path, node_id, description, meta_json in rows:
        meta = json.loads(meta_json or "{}")
        line = " ".join(
            [*(f"{k}: {v}" for k, v in meta.items() if v not in (None, "")), description or ""]
        ).strip()
        if line:
            out[node_id] = line
            out[path] = line
    return out


def signature(
    conn: sqlite3.Connection, tree: str, count: int | None = None, docs: dict[str, str] | None = None
) -> str | None:
    """What the index of `tree` was built from: root, last update, node count, document metadata
    (`count` and `docs`: already read by the caller)."""
    row = conn.execute("SELECT root_id, updated FROM trees WHERE name = ?", (tree,)).fetchone()
    if row is None:
        return None
    if count is None:
        count = conn.execute("SELECT COUNT(*) FROM nodes WHERE tree = ?", (tree,)).fetchone()[0]
    lines = json.dumps(sorted((_doc_context(conn, tree) if docs is None else docs).items()))
    return content_hash("index", str(row[0]), str(row[1]), str(count), lines, str(PIECE_CHARS))


def _saved(nodes: Sequence[Node] | None, digests: dict[str, str]) -> dict[str, Node] | None:
    """The saved nodes by id when they are the tree's rows (same ids), else None (the rows are parsed)."""
    if nodes is None or len(nodes) != len(digests):
        return None
    by_id = {n.id: n for n in nodes}
    return by_id if by_id.keys() == digests.keys() else None


def row_digests(rows: Sequence[tuple]) -> dict[str, str]:
    """A hash of each node row (`SELECT {NODE_COLUMNS}`), by node id."""
    return {r[0]: hashlib.sha256("\x1f".join(map(str, r)).encode()).hexdigest() for r in rows}


def _fingerprint(digests: dict[str, str], root: str | None, docs: dict[str, str]) -> str:
    """Everything the entries are derived from: the node rows, the root, the document lines and the
    derivation's settings. Equal fingerprints derive equal entries."""
    h = hashlib.sha256()
    for part in (ENTRY_FORMAT, str(PIECE_CHARS), root or "", json.dumps(sorted(docs.items()))):
        h.update(part.encode())
        h.update(b"\x00")
    for node_id in sorted(digests):
        h.update(f"{node_id}:{digests[node_id]}\x1e".encode())
    return h.hexdigest()


def sync_entries(conn: sqlite3.Connection, tree: str, nodes: Sequence[Node] | None = None) -> SyncReport:
    """Bring `tree`'s index up to date with its nodes, rewriting only changed entries.

    Runs on the caller's connection and transaction (the store's save), so a tree and its index
    are saved together or not at all. When the node rows are those last indexed (a rebuild that
    changed nothing) no entry is derived and none is written: only the state row's signature
    follows the tree's `updated` time. `nodes`: the tree's nodes as just saved (the store's save
    hook hands them over), used instead of parsing the rows again.
    """
    rows = conn.execute(f"SELECT {NODE_COLUMNS} FROM nodes WHERE tree = ?", (tree,)).fetchall()
    found = conn.execute("SELECT root_id FROM trees WHERE name = ?", (tree,)).fetchone()
    root = found[0] if found else None
    docs = _doc_context(conn, tree)
    digests = row_digests(rows)
    content = _fingerprint(digests, root, docs)
    sig = signature(conn, tree, len(rows), docs)
    state = conn.execute(
        "SELECT signature, entries, content FROM tree_index_state WHERE tree = ?", (tree,)
    ).fetchone()
    if sig is not None and state is not None and state[2] == content:
        if state[0] != sig:
            conn.execute("UPDATE tree_index_state SET signature = ? WHERE tree = ?", (sig, tree))
        return SyncReport(entries=state[1], unchanged=True)
    existing = {
        r[0]: r[1:]
        for r in conn.execute(
            "SELECT id, hash, rid, body_hash, node, src, leaf, parent, ord FROM tree_index WHERE tree = ?",
            (tree,),
        ).fetchall()
    }
    leaves = LeafReuse(rows, digests, existing, docs, _saved(nodes, digests))
    entries: list[Entry] = []
    if root is not None and root in leaves.nodes:
        entries = tree_entries(leaves.nodes, root, doc_context=docs, reuse=leaves.reuse, sources=leaves.keys)
    hashes = {}
    for e, body in zip(entries, body_hashes(entries), strict=True):
        hashes[e.id] = (body, e.row_hash(body))
    stale = [
        e
        for e in entries
        if e.id not in existing or existing[e.id][0] != hashes[e.id][1] or existing[e.id][4] != e.source
    ]
    # same text, new place (an ancestor's id changed): the row is updated, its FTS row and vectors stay
    moved = [e for e in stale if e.id in existing and existing[e.id][2] == hashes[e.id][0]]
    changed = [e for e in stale if not (e.id in existing and existing[e.id][2] == hashes[e.id][0])]
    wanted = {e.id for e in entries} | leaves.kept
    removed = [i for i in existing if i not in wanted]
    gone = [*removed, *(e.id for e in changed if e.id in existing)]
    _delete_rows(conn, [existing[i][1] for i in gone])
    # kept leaves under a new parent id: the entries naming it are re-pointed, their text untouched
    conn.executemany(
        "UPDATE tree_index SET parent = ?, hash = ? WHERE rid = ?",
        [
            (
                parent or None,
                row_hash(parent or None, existing[i][2], existing[i][7], bool(existing[i][5])),
                existing[i][1],
            )
            for i, parent in leaves.moves
        ],
    )
    conn.executemany(
        "UPDATE tree_index SET node = ?, parent = ?, leaf = ?, ord = ?, hash = ?, cite_json = ?, src = ?"
        " WHERE rid = ?",
        [
            (
                e.node,
                e.parent,
                int(e.leaf),
                e.order,
                hashes[e.id][1],
                cite_json(e.cite),
                e.source,
                existing[e.id][1],
            )
            for e in moved
        ],
    )
    last = conn.execute("SELECT COALESCE(MAX(rid), 0) FROM tree_index").fetchone()[0]  # new rows come after
    conn.executemany(
        "INSERT INTO tree_index(tree, id, node, parent, leaf, ord, hash, body_hash, text, context, cite_json, src)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                tree,
                e.id,
                e.node,
                e.parent,
                int(e.leaf),
                e.order,
                hashes[e.id][1],
                hashes[e.id][0],
                e.text,
                e.context,
                cite_json(e.cite),
                e.source,
            )
            for e in changed
        ],
    )
    # the FTS row shares the entry's rowid (`rid`) and reads its text from the entry (SQLite; PostgreSQL
    # searches the entries themselves, see `TreeIndex.lexical`)
    if changed and dialect.dialect_of(conn) == dialect.SQLITE:
        conn.execute(
            "INSERT INTO tree_index_fts(rowid, tree, id, body) SELECT rid, tree, id, body FROM tree_index"
            " WHERE rid > ?",
            (last,),
        )
    # a removed entry's vector goes, unless its text lives on under another id (a renamed ancestor):
    # `TreeIndex.vectors` reuses it by text, then drops it
    texts = {h[0] for h in hashes.values()} | {existing[i][2] for i in leaves.kept}
    dropped = [(tree, i) for i in removed if existing[i][2] not in texts]
    conn.executemany("DELETE FROM tree_index_vec WHERE tree = ? AND id = ?", dropped)
    if sig is None:
        conn.execute("DELETE FROM tree_index_state WHERE tree = ?", (tree,))
    else:
        conn.execute(
            "INSERT INTO tree_index_state(tree, signature, entries, updated, content) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (tree) DO UPDATE SET signature = excluded.signature, entries = excluded.entries,"
            " updated = excluded.updated, content = excluded.content",
            (
                tree,
                sig,
                len(entries) + len(leaves.kept),
                datetime.now(UTC).isoformat(timespec="seconds"),
                content,
            ),
        )
    return SyncReport(
        entries=len(entries) + len(leaves.kept),
        written=len(changed),
        removed=len(removed),
        moved=len(moved) + len(leaves.moves),
        reused=len(leaves.kept),
    )


def _delete_rows(conn: sqlite3.Connection, rids: Sequence[int], chunk: int = 500) -> None:
    """Delete entries and their FTS rows (an external-content FTS row is deleted with the text it indexed)."""
    for part, marks in in_batches(rids, chunk):
        if dialect.dialect_of(conn) == dialect.POSTGRESQL:  # no FTS table of its own there
            conn.execute(f"DELETE FROM tree_index WHERE rid IN ({marks})", part)
            continue
        conn.execute(
            "INSERT INTO tree_index_fts(tree_index_fts, rowid, tree, id, body)"
            f" SELECT 'delete', rid, tree, id, body FROM tree_index WHERE rid IN ({marks})",
            part,
        )
        conn.execute(f"DELETE FROM tree_index WHERE rid IN ({marks})", part)


def drop_entries(conn: sqlite3.Connection, tree: str) -> None:
    """Forget a tree's index (its tree is gone)."""
    if dialect.dialect_of(conn) == dialect.SQLITE:
        conn.execute(
            "INSERT INTO tree_index_fts(tree_index_fts, rowid, tree, id, body)"
            " SELECT 'delete', rid, tree, id, body FROM tree_index WHERE tree = ?",
            (tree,),
        )
    for table in ("tree_index", "tree_index_vec", "tree_index_state"):
        conn.execute(f"DELETE FROM {table} WHERE tree = ?", (tree,))


@dataclass(slots=True)
class IndexRow:
    id: str
    node: str
    parent: str | None
    leaf: bool
    order: int
    text: str
    context: str
    hash: str  # of the text indexed and embedded (context + text)
    cite: dict[str, Any] = field(default_factory=dict)


class TreeIndex:
    """The index of one tree in a store, synced when the tree changed: `index.lexical(question)` (BM25),
    `index.dense(question, embedder)`; `retrieve.treesearch.search_index` ranks and packs from it."""

    def __init__(self, store: IndexStore, tree: str) -> None:
        self.store = store
        self.tree = tree
        self.last_sync: SyncReport | None = None
        self._rows: list[IndexRow] | None = None
        self._vectors: tuple[str, np.ndarray] | None = None
        self.memo: dict[str, Any] = {}  # what searches derive from the rows (`treesearch.shape_of`)
        self.content: str | None = None  # what the entries come from; the rows, read later, are never older
        self.ensure()

    def _state(self, conn: sqlite3.Connection) -> tuple[bool, str | None]:
        """(whether the index is behind its tree, the fingerprint of what its entries come from)."""
        row = conn.execute("SELECT signature, content FROM tree_index_state WHERE tree = ?", (self.tree,)).fetchone()
        return row is None or row[0] != signature(conn, self.tree), None if row is None else row[1]

    def ensure(self) -> bool:
        """Re-sync when the tree changed since it was indexed (or was saved before the index existed),
        and forget what this object read when the entries changed since; True when it re-synced."""
        behind, content = self.store.read(self._state)
        if behind:
            self.last_sync = self.store.write(lambda c: sync_entries(c, self.tree))
            content = self.store.read(self._state)[1]
        if behind or content != self.content:
            self._rows = None
            self._vectors = None
            self.memo = {}
            self.content = content
        return behind

    def current(self) -> bool:
        """Whether the index is in step with the tree, no entry changed since this object was made."""
        behind, content = self.store.read(self._state)
        return not behind and content is not None and content == self.content

    @property
    def rows(self) -> list[IndexRow]:
        if self._rows is None:
            rows = self.store.read(
                lambda c: c.execute(
                    "SELECT id, node, parent, leaf, ord, text, context, body_hash, cite_json FROM tree_index"
                    " WHERE tree = ? ORDER BY leaf DESC, ord, rid",
                    (self.tree,),
                ).fetchall()
            )
            self._rows = [
                IndexRow(r[0], r[1], r[2], bool(r[3]), r[4], r[5], r[6], r[7], json.loads(r[8])) for r in rows
            ]
        return self._rows

    def lexical(self, question: str, limit: int = 5000) -> dict[str, float]:
        """BM25 (higher is better) of every entry sharing a content word with the question."""
        terms = query_terms(question)
        if not terms:
            return {}
        sql = (
            "SELECT id, bm25(tree_index_fts) FROM tree_index_fts WHERE tree_index_fts MATCH ? AND tree = ?"
            " ORDER BY bm25(tree_index_fts) LIMIT ?"
        )
        match = match_expression(terms)
        if getattr(self.store, "dialect", dialect.SQLITE) == dialect.POSTGRESQL:
            # a stand-in until the tree index's PostgreSQL search (scaleidx): ts_rank, negated like bm25
            sql = (
                "SELECT id, -ts_rank(to_tsvector('english', body), q) AS s FROM tree_index,"
                " to_tsquery('english', ?) AS q WHERE tree = ? AND to_tsvector('english', body) @@ q"
                " ORDER BY s, rid LIMIT ?"
            )
            match = " | ".join("".join(ch for ch in t if ch.isalnum()) for t in terms if any(ch.isalnum() for ch in t))
            if not match:
                return {}
        try:
            rows = self.store.read(lambda c: c.execute(sql, (match, self.tree, limit)).fetchall())
        except dialect.OperationalError as exc:  # every term is quoted: should not happen
            raise StoreError(f"index search failed for {question[:80]!r} ({exc})") from exc
        return {str(r[0]): -float(r[1]) for r in rows}

    def vectors(
        self, embedder: Embedder, *, max_seconds: float | None = None
    ) -> tuple[list[str], np.ndarray] | None:
        """Every entry's vector for `embedder`, embedding (and storing) the ones missing or stale.

        `max_seconds`: when embedding what is missing would take longer (timed on a first batch,
        which is kept), return None instead; the caller scores its best candidates densely instead.
        """
        import numpy as np

        rows = self.rows
        if self._vectors is not None and self._vectors[0] == embedder.id:
            return [r.id for r in rows], self._vectors[1]
        stored = self.store.read(
            lambda c: c.execute(
                "SELECT id, hash, vec FROM tree_index_vec WHERE tree = ? AND embedder = ?",
                (self.tree, embedder.id),
            ).fetchall()
        )
        have: dict[str, tuple[str, bytes]] = {r[0]: (r[1], r[2]) for r in stored}
        by_text = {h: vec for h, vec in have.values()}  # the same text is never embedded twice
        reused = []
        for r in rows:
            if (r.id not in have or have[r.id][0] != r.hash) and r.hash in by_text:
                have[r.id] = (r.hash, by_text[r.hash])
                reused.append(r)
        missing = [r for r in rows if r.id not in have or have[r.id][0] != r.hash]
        orphans = len({i for i, _, _ in stored} - {r.id for r in rows})
        if missing and max_seconds is not None and len(missing) > PROBE:
            started = time.perf_counter()
            probe = embed_rows(embedder, missing[:PROBE])
            per_text = (time.perf_counter() - started) / PROBE
            self._store_vectors(embedder, missing[:PROBE], probe)
            if per_text * (len(missing) - PROBE) > max_seconds:
                return None
            return self.vectors(embedder)
        if missing or reused or orphans:
            fresh = embed_rows(embedder, missing)

            def save(c: sqlite3.Connection) -> None:
                c.executemany(
                    "INSERT INTO tree_index_vec(tree, id, embedder, hash, vec) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (tree, embedder, id) DO UPDATE SET hash = excluded.hash, vec = excluded.vec",
                    [
                        (self.tree, r.id, embedder.id, r.hash, v.tobytes())
                        for r, v in zip(missing, fresh, strict=True)
                    ]
                    + [(self.tree, r.id, embedder.id, r.hash, have[r.id][1]) for r in reused],
                )
                c.execute(  # vectors kept only for reuse by text: their entries are gone
                    "DELETE FROM tree_index_vec WHERE tree = ? AND id NOT IN (SELECT id FROM tree_index WHERE tree = ?)",
                    (self.tree, self.tree),
                )

            self.store.write(save)
            for r, v in zip(missing, fresh, strict=True):
                have[r.id] = (r.hash, v.tobytes())
        matrix = (
            np.frombuffer(b"".join(have[r.id][1] for r in rows), dtype=np.float32).reshape(
                len(rows), embedder.dim
            )
            if rows
            else np.zeros((0, embedder.dim), dtype=np.float32)
        )
        self._vectors = (embedder.id, matrix)
        return [r.id for r in rows], matrix

    def _store_vectors(self, embedder: Embedder, rows: Sequence[IndexRow], vecs: np.ndarray) -> None:
        self.store.write(
            lambda c: c.executemany(
                "INSERT INTO tree_index_vec(tree, id, embedder, hash, vec) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (tree, embedder, id) DO UPDATE SET hash = excluded.hash, vec = excluded.vec",
                [
                    (self.tree, r.id, embedder.id, r.hash, v.tobytes())
                    for r, v in zip(rows, vecs, strict=True)
                ],
            )
        )

    def dense(
        self,
        question: str,
        embedder: Embedder,
        *,
        candidates: Sequence[str] = (),
        max_seconds: float | None = None,
    ) -> dict[str, float]:
        """Cosine of every entry with the question; when embedding the whole index would take more than
        `max_seconds`, of the `candidates` only (their vectors are embedded now and kept)."""
        import numpy as np

        got = self.vectors(embedder, max_seconds=max_seconds)
        query = embedder.embed([question])[0]
        if got is not None:
            ids, matrix = got
            return {i: float(s) for i, s in zip(ids, matrix @ query, strict=True)} if ids else {}
        wanted = set(candidates)
        rows = [r for r in self.rows if r.id in wanted]
        stored = {
            i: (h, v)
            for i, h, v in self.store.read(
                lambda c: c.execute(
                    "SELECT id, hash, vec FROM tree_index_vec WHERE tree = ? AND embedder = ?",
                    (self.tree, embedder.id),
                ).fetchall()
            )
            if i in wanted
        }
        missing = [r for r in rows if r.id not in stored or stored[r.id][0] != r.hash]
        if missing:
            fresh = embed_rows(embedder, missing)
            self._store_vectors(embedder, missing, fresh)
            for r, v in zip(missing, fresh, strict=True):
                stored[r.id] = (r.hash, v.tobytes())
        out = {}
        for r in rows:
            vec = np.frombuffer(stored[r.id][1], dtype=np.float32)
            out[r.id] = float(vec @ query)
        return out


def embed_rows(embedder: Embedder, rows: Sequence[IndexRow], batch: int = 256) -> np.ndarray:
    """Vectors of entries (context and text, cut to `EMBED_CHARS`), in batches."""
    import numpy as np

    texts = [(f"{r.context}\n{r.text}" if r.context else r.text)[:EMBED_CHARS] for r in rows]
    parts = [embedder.embed(texts[i : i + batch]) for i in range(0, len(texts), batch)]
    return np.concatenate(parts) if parts else np.zeros((0, embedder.dim), dtype=np.float32)

