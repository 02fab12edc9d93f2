"""A tree's contextual index in the store: built with the tree, updated by content hash, searched fast.

`sync_entries(conn, tree)` runs inside the store's save transaction (a hook on the store,
registered by `retrieve.indexcache.attach(store)`): it derives the contextual entries of the saved tree (`retrieve.context`),
compares their content hashes with what is indexed and rewrites only the entries that changed,
in the `tree_index` table and its FTS5 index (external content: BM25 with the porter stemmer over
`tree_index.body`, the same query building as `retrieve.bm25`). No model call: titles, pages, times
and summaries are already in the nodes. Incremental: a save whose node rows are those last indexed
(a content fingerprint) derives nothing, and a leaf whose inputs did not change is neither parsed
nor derived again (`retrieve.indexreuse`).

The sync is `retrieve.indexsync`; with the entries it writes each inner entry's leaf count and the
default embedder's vectors (`retrieve.indexwrite`). The SQL is the store's, per dialect
(`store.treeindex_tables`). Vectors are per embedder (`tree_index_vec`, keyed by entry hash):
`TreeIndex.vectors()` embeds the entries of another embedder that have no vector for the current
hash, so an edit re-embeds only what changed.

Two ways to read an index: `rows` (every entry: the exact path, the navigators) and, for a large
one, a question's candidates only (`lexical_top`, `dense_top`, `with_ancestors`;
`retrieve.treesearch.rank_candidates`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from knowtree.retrieve import vecfile
from knowtree.retrieve.bm25 import query_terms
from knowtree.retrieve.indexsync import SyncReport, drop_entries, row_digests, signature, sync_entries
from knowtree.retrieve.indexwrite import (
    ANN_ENTRIES,
    EMBED_CHARS,
    WRITE_EMBEDDER,
    ann_entries,
    embed_rows,
    embed_texts,
    leaf_counts,
    write_embedder,
)
from knowtree.retrieve.median import anchor_median
from knowtree.store.treeindex_tables import tables

if TYPE_CHECKING:
    import numpy as np

    from knowtree.retrieve.embed import Embedder

T = TypeVar("T")
PROBE = 64  # entries embedded to time an embedder before embedding a whole index


class IndexStore(Protocol):
    """What the index needs from a store: run a function on its connection, read-only or in a transaction."""

    def read(self, fn: Callable[[Any], T]) -> T: ...

    def write(self, fn: Callable[[Any], T]) -> T: ...


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
TERM_DOCS_KEPT = 100_000  # query words whose entry counts an index object keeps (`TreeIndex._term_docs`)
COMMON_TERM_MIN = 5000
FETCHED_MAX = 50_000  # entries read by id and kept per index object (a serving process's bound: ~50 MB)
#: the approximate top-k reads this many times k and keeps the k best: on E9's crowded synthetic
#: vectors (115k) the top-256 overlapped the exact one 0.59 reading 256, 0.83 reading 512 (+10 ms)
ANN_FETCH = 2


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
        self._matrix: tuple[str, list[str], vecfile.Positions, np.ndarray] | None = None
        self._fetched: dict[str, IndexRow] = {}
        self.memo: dict[str, Any] = {}  # what searches derive from the rows (`treesearch.shape_of`)
        self.content: str | None = None  # what the entries come from; the rows, read later, are never older
        self.entries = 0  # how many entries the index has
        self._held = threading.local()  # a thread's connection while `in_one_read` runs
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

    def _read(self, fn: Callable[[Any], T]) -> T:
        """`store.read(fn)`, or `fn` on the connection `in_one_read` holds for this thread."""
        conn = getattr(self._held, "conn", None)
        return self.store.read(fn) if conn is None else fn(conn)

    def in_one_read(self, fn: Callable[[], T]) -> T:
        """`fn()`, the candidate path's reads in it (`fetch`, `lexical_top`, `dense_top`) made in one
        read transaction where that saves round trips: on PostgreSQL a question's 5-8 reads cost a
        BEGIN and a COMMIT each otherwise, and they see one snapshot. On SQLite, whose reads are in
        process, `fn()` as is (its store's lock is not held across the numpy work)."""
        if getattr(self.store, "dialect", "sqlite") != "postgresql" or getattr(self._held, "conn", None):
            return fn()

        def run(conn: Any) -> T:
            self._held.conn = conn
            try:
                return fn()
            finally:
                self._held.conn = None

        return self.store.read(run)

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
            for r in self._read(lambda c: self.sql.rows_by_id(c, self.tree, want)):
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
            docs, total = self._term_docs(c, terms)
            keep = [t for t in terms if not (t in docs and 2 * docs[t] >= total)] or terms
            common = COMMON_TERM_DOCS
            if any(docs.get(t, 0) <= common * total for t in keep):  # a rare word carries the question
                keep = [t for t in keep if not (docs.get(t, 0) > max(COMMON_TERM_MIN, common * total))]
            return self.sql.lexical_top(c, self.tree, keep, limit)

        return {str(i): -float(b) for i, b in self._read(run)}

    def _term_docs(self, conn: Any, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """`sql.term_docs`, each word counted once while the counts cannot have changed (the store's
        `term_docs_key`; a dialect without one counts every time)."""
        key, total = self.sql.term_docs_key(conn, self.tree)
        if key is None:
            return self.sql.term_docs(conn, self.tree, terms)
        cached = self.memo.get("term-docs")
        if cached is None or cached[0] != key or len(cached[1]) > TERM_DOCS_KEPT:
            cached = self.memo["term-docs"] = (key, {})
        known: dict[str, int | None] = cached[1]
        missing = [t for t in dict.fromkeys(terms) if t not in known]
        if missing:
            got, _ = self.sql.term_docs(conn, self.tree, missing)
            known.update((t, got.get(t)) for t in missing)  # None: FTS5 cuts it into several or none
        return {t: n for t in terms if (n := known[t]) is not None}, total

    def matrix(self, embedder: Embedder) -> tuple[list[str], vecfile.Positions, np.ndarray]:
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
        self._matrix = (embedder.id, ids, vecfile.Positions(ids), mat)
        return ids, self._matrix[2], mat

    def keep_vectors_file(self, embedder: Embedder | None = None) -> bool:
        """Write the vectors file beside an SQLite database now (`vecfile`: what `matrix` maps), from
        the vectors the save wrote with the entries (`embedder`: the write embedder by default), so
        the first question of the next process maps it instead of reading every vector's row (2.5 to
        6.6 s at 10^5 entries). False where no file is kept: PostgreSQL, a database in memory, an
        empty index, no embedding extra."""
        embedder = embedder or write_embedder(WRITE_EMBEDDER)
        if embedder is None or self._vector_file() is None or not self.entries:
            return False
        self.matrix(embedder)
        return True

    def _vector_file(self) -> str | None:
        """The SQLite file the vectors' cache file goes beside (None: a database in memory, or not a file)."""
        return vecfile.database_file(self.store)

    def dense_top(
        self, question: str, embedder: Embedder, k: int
    ) -> tuple[dict[str, float], Callable[[Sequence[str]], dict[str, float]], float]:
        """The `k` entries most similar to `question` (cosine), a lookup of the cosines of any entries
        (by a list of ids), and the median cosine that `normalize_dense` anchors on.

        Two ways. Exact (SQLite; a PostgreSQL tree under `ann_entries()`): every vector is scored, one
        matrix product, the median is over every entry. By the database's HNSW index (PostgreSQL, a
        tree of `ann_entries()` entries or more, the embedder whose vectors the sync writes): the top-k
        is pgvector's (`store.treeindex_pg.ann_top`), other entries' cosines are read by id, and the
        median is that of a fixed sample of `MEDIAN_SAMPLE` of the tree's vectors (read once per index
        object): no process holds the tree's vectors."""
        import numpy as np

        if self._uses_ann(embedder) and (got := self._ann_top(question, embedder, k)) is not None:
            return got  # None: the tree has no approximate index (yet): scored exactly
        ids, pos, mat = self.matrix(embedder)
        if not ids:
            return {}, lambda _ids: {}, 0.0
        scores = mat @ embedder.embed([question])[0]
        n = len(scores)
        mid = float(np.partition(scores, n // 2)[n // 2])
        k = min(k, n)
        top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)

        def cosines(wanted: Sequence[str]) -> dict[str, float]:
            return {i: float(scores[p]) for i, p in pos.of(wanted).items()}

        return {ids[p]: float(scores[p]) for p in top}, cosines, mid

    def _uses_ann(self, embedder: Embedder) -> bool:
        """Whether a dense top-k goes to the database's approximate index (see `dense_top`)."""
        if embedder.dim not in self.sql.ANN_DIMS or self.entries < ann_entries():
            return False
        written = write_embedder(WRITE_EMBEDDER)  # its vectors are complete: the sync writes them
        return written is not None and written.id == embedder.id

    def _ann_top(
        self, question: str, embedder: Embedder, k: int
    ) -> tuple[dict[str, float], Callable[[Sequence[str]], dict[str, float]], float] | None:

        query = embedder.embed([question])[0]
        fetched = self._read(lambda c: self.sql.ann_top(c, self.tree, embedder.id, query, ANN_FETCH * k))
        if fetched is None:
            return None
        mid = anchor_median(self._read, self.sql, self.tree, self.memo, embedder, query)
        if mid is None:
            return {}, lambda _ids: {}, 0.0
        near = self._current(sorted(fetched, key=lambda r: -r[2]), k)

        def cosines(wanted: Sequence[str]) -> dict[str, float]:
            out = {i: near[i] for i in wanted if i in near}
            rest = {i: r.hash for i, r in self.fetch([i for i in wanted if i not in near]).items()}
            if rest:  # the entries' rows: read already by the caller (`with_ancestors`), kept by `fetch`
                out.update(self._read(lambda c: self.sql.cosines(c, self.tree, embedder.id, query, rest)))
            return out

        return near, cosines, mid

    def _current(self, ordered: Sequence[tuple[str, str, float]], k: int) -> dict[str, float]:
        """{id: cosine} of the first `k` of (id, vector's text hash, cosine), best first, whose vector
        is of its entry's current text (`IndexRow.hash`). The entries are read here, `k` at a time
        (the question reads them next anyway: `fetch` keeps them); one more read only where some
        of the first `k` were of another text or of no entry."""
        near: dict[str, float] = {}
        start = 0
        while len(near) < k and start < len(ordered):
            part = ordered[start : start + k - len(near)]
            rows = self.fetch([i for i, _, _ in part])
            near.update((i, c) for i, h, c in part if (r := rows.get(i)) is not None and r.hash == h)
            start += len(part)
        return near

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


__all__ = [
    "ANN_ENTRIES",
    "EMBED_CHARS",
    "WRITE_EMBEDDER",
    "IndexRow",
    "IndexStore",
    "SyncReport",
    "TreeIndex",
    "ann_entries",
    "drop_entries",
    "embed_rows",
    "embed_texts",
    "leaf_counts",
    "row_digests",
    "signature",
    "sync_entries",
]
