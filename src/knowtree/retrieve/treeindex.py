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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from knowtree.errors import ConfigError
from knowtree.retrieve import vecfile
from knowtree.retrieve.bm25 import query_terms
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
from knowtree.store.treeindex_tables import tables
from knowtree.types import Node, content_hash

if TYPE_CHECKING:
    import numpy as np

    from knowtree.retrieve.embed import Embedder

T = TypeVar("T")
EMBED_CHARS = 2000  # an entry's text is embedded up to this many characters
PROBE = 64  # entries embedded to time an embedder before embedding a whole index
WRITE_EMBEDDER = "default"  # the embedder whose vectors are written with the entries (None: none)


class IndexStore(Protocol):
    """What the index needs from a store: run a function on its connection, read-only or in a transaction."""

    def read(self, fn: Callable[[Any], T]) -> T: ...

    def write(self, fn: Callable[[Any], T]) -> T: ...


@dataclass(slots=True)
class SyncReport:
    entries: int = 0
    written: int = 0  # entries added or whose text changed (indexed again)
    removed: int = 0
    moved: int = 0  # same text under a new parent or position: row updated, not re-indexed
    unchanged: bool = False  # the nodes were those last indexed: no entry derived, none written
    reused: int = 0  # entries of leaves whose inputs did not change: neither derived nor written
    embedded: int = 0  # entries embedded by the default embedder (their vectors written with them)


def _doc_context(conn: Any, tree: str) -> dict[str, str]:
    """A line per document of a collection (its metadata and description), by node id and by path."""
    sql = tables(conn)
    out: dict[str, str] = {}
    for path, node_id, description, meta_json in sql.doc_lines(conn, tree):
        meta = json.loads(meta_json or "{}")
        line = " ".join(
            [*(f"{k}: {v}" for k, v in meta.items() if v not in (None, "")), description or ""]
        ).strip()
        if line:
            out[node_id] = line
            out[path] = line
    return out


def signature(
    conn: Any, tree: str, count: int | None = None, docs: dict[str, str] | None = None
) -> str | None:
    """What the index of `tree` was built from: root, last update, node count, document metadata
    (`count` and `docs`: already read by the caller)."""
    sql = tables(conn)
    row = sql.tree_head(conn, tree)
    if row is None:
        return None
    if count is None:
        count = sql.node_count(conn, tree)
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


def sync_entries(
    conn: Any,
    tree: str,
    nodes: Sequence[Node] | None = None,
    *,
    embedder: Embedder | str | None = WRITE_EMBEDDER,
) -> SyncReport:
    """Bring `tree`'s index up to date with its nodes, rewriting only changed entries.

    Runs on the caller's connection and transaction (the store's save), so a tree and its index
    are saved together or not at all. When the node rows are those last indexed (a rebuild that
    changed nothing) no entry is derived and none is written: only the state row's signature
    follows the tree's `updated` time. `nodes`: the tree's nodes as just saved (the store's save
    hook hands them over), used instead of parsing the rows again. `embedder` ("default": the
    project's default, skipped without the embedding extra; None: none): the entries written get
    their vectors in the same transaction, so no question embeds them.
    """
    sql = tables(conn)
    rows = sql.node_rows(conn, tree)
    head = sql.tree_head(conn, tree)
    root = head[0] if head else None
    docs = _doc_context(conn, tree)
    digests = row_digests(rows)
    content = _fingerprint(digests, root, docs)
    sig = signature(conn, tree, len(rows), docs)
    state = sql.read_state(conn, tree)
    if sig is not None and state is not None and state[2] == content:
        if state[0] != sig:
            sql.set_signature(conn, tree, sig)
        return SyncReport(entries=state[1], unchanged=True)
    existing = {r[0]: r[1:] for r in sql.indexed(conn, tree)}
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
    sql.delete_entries(conn, [existing[i][1] for i in gone])
    # kept leaves under a new parent id: the entries naming it are re-pointed, their text untouched
    sql.repoint(
        conn,
        (
            (
                parent or None,
                row_hash(parent or None, existing[i][2], existing[i][7], bool(existing[i][5])),
                existing[i][1],
            )
            for i, parent in leaves.moves
        ),
    )
    sql.move(
        conn,
        (
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
        ),
    )
    sql.insert_entries(
        conn,
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
    # a removed entry's vector goes, unless its text lives on under another id (a renamed ancestor):
    # it is reused by text below (or by `TreeIndex.vectors` for another embedder), then dropped
    texts = {h[0] for h in hashes.values()} | {existing[i][2] for i in leaves.kept}
    sql.drop_vectors(conn, tree, [i for i in removed if existing[i][2] not in texts])
    write_leaf_counts(conn, tree)
    embedded = embed_missing(conn, tree, _write_embedder(embedder))
    sql.write_state(
        conn,
        tree,
        sig,
        len(entries) + len(leaves.kept),
        datetime.now(UTC).isoformat(timespec="seconds"),
        content,
    )
    return SyncReport(
        entries=len(entries) + len(leaves.kept),
        written=len(changed),
        removed=len(removed),
        moved=len(moved) + len(leaves.moves),
        reused=len(leaves.kept),
        embedded=embedded,
    )


def leaf_counts(links: Sequence[tuple[Any, str, str | None, int, int]]) -> dict[str, int]:
    """How many leaf entries lie below each entry (`treescore.rollup`'s N), from (rid, id, parent, leaf, _)."""
    parent = {r[1]: r[2] for r in links}
    count: dict[str, int] = {}
    for r in links:
        if not r[3]:
            continue
        p = parent.get(r[1])
        while p is not None:
            count[p] = count.get(p, 0) + 1
            p = parent.get(p)
    return count


def write_leaf_counts(conn: Any, tree: str) -> None:
    """Store each inner entry's number of leaves below it (only the counts that changed are written)."""
    sql = tables(conn)
    links = sql.links(conn, tree)
    count = leaf_counts(links)
    sql.set_leaf_counts(conn, ((count.get(r[1], 0), r[0]) for r in links if r[4] != count.get(r[1], 0)))


def _write_embedder(embedder: Embedder | str | None) -> Embedder | None:
    if embedder is None or not isinstance(embedder, str):
        return embedder
    from knowtree.retrieve.embed import get_embedder

    try:
        return get_embedder(None if embedder == "default" else embedder)
    except ConfigError:  # no embedding extra: the index is lexical only
        return None


def embed_missing(conn: Any, tree: str, embedder: Embedder | None) -> int:
    """Give every entry of `tree` a vector by `embedder` of its current text (a text embedded before
    is reused, never embedded twice), drop that embedder's vectors of entries gone; returns how
    many entries were embedded."""
    sql = tables(conn)
    if embedder is None:
        return 0
    missing = sql.unembedded(conn, tree, embedder.id)
    if missing:
        have = dict(sql.vectors_by_hash(conn, tree, embedder.id, sorted({m[1] for m in missing})))
        new = [m for m in missing if m[1] not in have]
        fresh = embed_texts(embedder, [_embed_text(m[3], m[2]) for m in new])
        for m, v in zip(new, fresh, strict=True):
            have[m[1]] = v.tobytes()
        sql.put_vectors(conn, ((tree, m[0], embedder.id, m[1], have[m[1]]) for m in missing))
    sql.drop_orphan_vectors(conn, tree, embedder.id)
    return len(missing)


def drop_entries(conn: Any, tree: str) -> None:
    """Forget a tree's index (its tree is gone)."""
    sql = tables(conn)
    sql.drop_tree(conn, tree)


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
    leaves: int = 0  # an inner entry's number of leaf entries below it

    @classmethod
    def of(cls, r: Sequence[Any]) -> IndexRow:
        """From a row of `sql.ENTRY_COLUMNS`."""
        return cls(r[0], r[1], r[2], bool(r[3]), r[4], r[5], r[6], r[7], json.loads(r[8]), int(r[9]))


COMMON_TERM_DOCS = 0.05  # see `TreeIndex.lexical_top`
COMMON_TERM_MIN = 5000
FETCHED_MAX = 50_000  # entries read by id and kept per index object (a serving process's bound: ~50 MB)


class TreeIndex:
    """The index of one tree in a store, synced when the tree changed: `index.lexical(question)` (BM25),
    `index.dense(question, embedder)`; `retrieve.treesearch.search_index` ranks and packs from it.

    Two ways to read it: `rows` (every entry, read once: the exact path and the navigators) and
    `fetch(ids)` / `dense_top` (only a question's candidates and their ancestors: large trees)."""

    def __init__(self, store: IndexStore, tree: str) -> None:
        self.store = store
        self.tree = tree
        self.sql = tables(store)  # the index's SQL in the store's dialect
        self.last_sync: SyncReport | None = None
        self._rows: list[IndexRow] | None = None
        self._vectors: tuple[str, np.ndarray] | None = None
        self._matrix: tuple[str, list[str], dict[str, int], np.ndarray] | None = None
        self._fetched: dict[str, IndexRow] = {}
        self.memo: dict[str, Any] = {}  # what searches derive from the rows (`treesearch.shape_of`)
        self.content: str | None = None  # what the entries come from; the rows, read later, are never older
        self.entries = 0  # how many entries the index has
        self.ensure()

    def _state(self, conn: Any) -> tuple[bool, str | None, int]:
        """(whether the index is behind its tree, the fingerprint of what its entries come from, entries)."""
        row = self.sql.read_state(conn, self.tree)
        behind = row is None or row[0] != signature(conn, self.tree)
        return behind, None if row is None else row[2], 0 if row is None else int(row[1])

    def ensure(self) -> bool:
        """Re-sync when the tree changed since it was indexed (or was saved before the index existed),
        and forget what this object read when the entries changed since; True when it re-synced."""
        behind, content, entries = self.store.read(self._state)
        if behind:
            self.last_sync = self.store.write(lambda c: sync_entries(c, self.tree))
            _, content, entries = self.store.read(self._state)
        if behind or content != self.content:
            self._rows = None
            self._vectors = None
            self._matrix = None
            self._fetched = {}
            self.memo = {}
            self.content = content
        self.entries = entries
        return behind

    def current(self) -> bool:
        """Whether the index is in step with the tree, no entry changed since this object was made."""
        behind, content, _ = self.store.read(self._state)
        return not behind and content is not None and content == self.content

    @property
    def rows(self) -> list[IndexRow]:
        if self._rows is None:
            self._rows = [
                IndexRow.of(r) for r in self.store.read(lambda c: self.sql.entry_rows(c, self.tree))
            ]
        return self._rows

    def fetch(self, ids: Sequence[str]) -> dict[str, IndexRow]:
        """The entries named (those that exist), read by id: a question reads its candidates only."""
        if self._rows is not None and not self._fetched:
            self._fetched = {r.id: r for r in self._rows}
        want = [i for i in dict.fromkeys(ids) if i not in self._fetched]
        if want:
            if len(self._fetched) + len(want) > FETCHED_MAX:
                self._fetched = {}
            for r in self.store.read(lambda c: self.sql.rows_by_id(c, self.tree, want)):
                row = IndexRow.of(r)
                self._fetched[row.id] = row
        return {i: self._fetched[i] for i in ids if i in self._fetched}

    def with_ancestors(self, ids: Sequence[str]) -> dict[str, IndexRow]:
        """The entries named and every entry above them (one read per level)."""
        out = self.fetch(ids)
        level = list(out.values())
        while level:
            parents = [r.parent for r in level if r.parent is not None and r.parent not in out]
            got = self.fetch(parents)
            out.update(got)
            level = list(got.values())
        return out

    def lexical(self, question: str, limit: int = 5000) -> dict[str, float]:
        """BM25 (higher is better) of the `limit` best entries sharing a content word with the question."""
        terms = query_terms(question)
        if not terms:
            return {}
        rows = self.store.read(lambda c: self.sql.lexical(c, self.tree, terms, limit))
        return {str(r[0]): -float(r[1]) for r in rows}

    def lexical_top(self, question: str, limit: int) -> dict[str, float]:
        """`lexical`'s `limit` best entries, read the fast way for a large index: a term held by at
        least half of the entries is left out of the query (FTS5's BM25 gives it the floor idf,
        1e-6: it moves no score by more than that, while ranking every entry holding it was most of
        the time), and the tree filter applies after ranking (`store.treeindex_sqlite.lexical_top`).

        Not exact: when the question has a word held by at most `COMMON_TERM_DOCS` of the entries,
        a word held by more than that share and more than `COMMON_TERM_MIN` entries is left out too
        (ranking the entries that hold it is what a large index's lexical search costs: at 10^5
        entries, two words in a fifth of them took 130-200 ms of 140-280; their idf is low, ~1.6)."""
        terms = query_terms(question)
        if not terms:
            return {}

        def run(c: Any) -> list[tuple[str, float]]:
            docs, total = self.sql.term_docs(c, terms)
            keep = [t for t in terms if not (t in docs and 2 * docs[t] >= total)] or terms
            common = COMMON_TERM_DOCS
            if any(docs.get(t, 0) <= common * total for t in keep):  # a rare word carries the question
                keep = [t for t in keep if not (docs.get(t, 0) > max(COMMON_TERM_MIN, common * total))]
            return self.sql.lexical_top(c, self.tree, keep, limit)

        return {str(i): -float(b) for i, b in self.store.read(run)}

    def matrix(self, embedder: Embedder) -> tuple[list[str], dict[str, int], np.ndarray]:
        """(ids, position by id, vectors) of every entry by `embedder`, read once per index object;
        entries without a vector of their current text are embedded first (the lazy path: an
        embedder other than the one whose vectors are written with the entries)."""
        import numpy as np

        if self._matrix is not None and self._matrix[0] == embedder.id:
            return self._matrix[1], self._matrix[2], self._matrix[3]
        db = self._vector_file()
        cached = vecfile.load(db, self.tree, embedder.id, self.content or "", embedder.dim) if db else None
        if cached is not None and len(cached[0]) == self.entries:
            ids, mat = cached
        else:
            got = self.store.read(lambda c: self.sql.current_vectors(c, self.tree, embedder.id))
            if len(got) != self.entries:
                self.vectors(embedder)  # embeds and stores what is missing
                self._vectors = None
                got = self.store.read(lambda c: self.sql.current_vectors(c, self.tree, embedder.id))
            ids = [r[0] for r in got]
            mat = (
                np.frombuffer(b"".join(r[1] for r in got), dtype=np.float32).reshape(len(got), embedder.dim)
                if got
                else np.zeros((0, embedder.dim), dtype=np.float32)
            )
            if db and len(ids) == self.entries and self.current():  # the rows read are this content's
                vecfile.save(db, self.tree, embedder.id, self.content or "", ids, mat)
        self._matrix = (embedder.id, ids, {i: n for n, i in enumerate(ids)}, mat)
        return ids, self._matrix[2], mat

    def _vector_file(self) -> str | None:
        """The SQLite file the vectors' cache file goes beside (None: a database in memory, or not a file)."""
        path = getattr(self.store, "path", "")
        if getattr(self.store, "dialect", "sqlite") != "sqlite" or not path or path == ":memory:":
            return None
        return str(path)

    def dense_top(
        self, question: str, embedder: Embedder, k: int
    ) -> tuple[dict[str, float], Callable[[str], float | None], float]:
        """The `k` entries most similar to `question` (cosine), a lookup of any entry's cosine, and
        the median cosine over all entries (exact: every vector is scored, one matrix product)."""
        import numpy as np

        ids, pos, mat = self.matrix(embedder)
        if not ids:
            return {}, lambda _i: None, 0.0
        scores = mat @ embedder.embed([question])[0]
        n = len(scores)
        mid = float(np.partition(scores, n // 2)[n // 2])
        k = min(k, n)
        top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)

        def cosine(i: str) -> float | None:
            p = pos.get(i)
            return None if p is None else float(scores[p])

        return {ids[p]: float(scores[p]) for p in top}, cosine, mid

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
        stored = self.store.read(lambda c: self.sql.vectors(c, self.tree, embedder.id))
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

            def save(c: Any) -> None:
                self.sql.put_vectors(
                    c,
                    [
                        (self.tree, r.id, embedder.id, r.hash, v.tobytes())
                        for r, v in zip(missing, fresh, strict=True)
                    ]
                    + [(self.tree, r.id, embedder.id, r.hash, have[r.id][1]) for r in reused],
                )
                self.sql.drop_orphan_vectors(
                    c, self.tree
                )  # kept only for reuse by text: their entries are gone

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
            lambda c: self.sql.put_vectors(
                c,
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
            for i, h, v in self.store.read(lambda c: self.sql.vectors(c, self.tree, embedder.id))
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


def _embed_text(context: str, text: str) -> str:
    return (f"{context}\n{text}" if context else text)[:EMBED_CHARS]


def embed_texts(embedder: Embedder, texts: Sequence[str], batch: int = 256) -> np.ndarray:
    """Vectors of texts, in batches."""
    import numpy as np

    parts = [embedder.embed(texts[i : i + batch]) for i in range(0, len(texts), batch)]
    return np.concatenate(parts) if parts else np.zeros((0, embedder.dim), dtype=np.float32)


def embed_rows(embedder: Embedder, rows: Sequence[IndexRow], batch: int = 256) -> np.ndarray:
    """Vectors of entries (context and text, cut to `EMBED_CHARS`), in batches."""
    return embed_texts(embedder, [_embed_text(r.context, r.text) for r in rows], batch)
