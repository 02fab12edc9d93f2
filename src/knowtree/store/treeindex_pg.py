"""The tree index's tables on PostgreSQL: the functions of `store.treeindex_sqlite` (same names, same
meaning), with BM25 computed in SQL the way SQLite's FTS5 computes it, and vectors in pgvector.

Lexical search. `ts_rank` is not BM25, so the index keeps its own postings (store/bm25_pg.py: FTS5's
BM25 in SQL): every entry's text (context, newline, text) is cut into terms as FTS5 cuts it,
stored in blocks of row ids (`tree_index_postings(tree, term, seg, rids, tfs, lens)`,
store/bm25_blocks.py); `tree_index_df(tree, term, docs)` and
`tree_index_stats(tree, entries, tokens)` hold the statistics. N, n_t and avgdl are those of the tree
searched (FTS5's are its table's, every tree of the SQLite file: equal for a file of one tree, and
here no tree's ranking depends on another's, a tenant's on another tenant's). Returned negated, as
FTS5's `bm25()` is (lower is better).

Vectors: `tree_index_vec.emb` holds each vector as a pgvector value beside its bytes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from knowtree.store import pgbulk
from knowtree.store.bm25_blocks import copy_lines
from knowtree.store.bm25_pg import (
    Postings,
    add_counts,
    add_postings,
    count_terms,
    drop_postings,
    fts_token_lists,
    fts_tokens,
    remove_postings,
    stats,
    weighted_query,
)
from knowtree.store.fts_terms import cut_blocks
from knowtree.store.pgbulk import batches, staged_upsert_binary, vector_tuples
from knowtree.store.rows import NODE_COLUMNS, in_batches
from knowtree.store.treeindex_sqlite import (
    ENTRY_COLUMNS,
    current_vectors,
    doc_lines,
    drop_vectors,
    entry_rows,
    index_sizes,
    indexed,
    links,
    move,
    node_rows,
    read_state,
    repoint,
    set_signature,
    tree_head,
    unembedded,
    vectors,
    write_state,
)

POSTINGS = Postings("tree_index_postings", "tree_index_df", "tree_index_stats", "tree", blocks=True)


# -- writing entries: their postings and the statistics with them ---------------------------------
ENTRY_INSERT = ("rid", "tree", "id", "node", "parent", "leaf", "ord", "hash", "body_hash", "text", "context",
                "cite_json", "src", "toklen")


#: a batch prepared ahead (`prepare_entries`): its row ids, its block rows' COPY lines, its lengths
Prepared = tuple[list[int], list[tuple[str, str, int]], list[int]]


def prepare_entries(rows: Sequence[tuple], rids: Sequence[int]) -> Prepared:
    """A batch's postings cut ahead into block rows (`bm25_blocks.cut_blocks` of each entry's body,
    the entries numbered `rids`): no connection, so a thread can cut the next batch while this one is
    written (`EntryWriter.write`)."""
    lines, lengths = cut_blocks([f"{r[9]}\n{r[8]}" if r[9] else r[8] for r in rows], rids)
    return list(rids), lines, lengths


class EntryWriter:
    """Writes one tree's new entries batch by batch, each batch's rows and postings COPYed before the
    next; the statistics (df, entries, tokens) are added up here and upserted once, by `close`, not
    once per batch (a batch's distinct terms were a staging round each: ~200 rounds for 10⁶ leaves,
    each updating the same df rows again). `reserve(n)` takes the row ids of the next n rows at once,
    so that `prepare` (in another thread) can cut a batch into blocks of its final row ids."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.tree: str | None = None
        self.docs: Counter[str] = Counter()
        self.entries = 0
        self.tokens = 0
        self.reserved: list[int] = []

    def _next_ids(self, n: int) -> list[int]:
        """n row ids from the table's identity, ascending (FTS5's ties: stored order)."""
        return sorted(
            r[0]
            for r in self.conn.execute(
                "SELECT nextval(pg_get_serial_sequence('tree_index', 'rid')) FROM generate_series(1, ?)", (n,)
            ).fetchall()
        )

    def reserve(self, n: int) -> None:
        """Row ids for the next `n` rows, in their order (`prepare`'s `start` counts from these)."""
        self.reserved = self._next_ids(n) if n else []

    def prepare(self, part: Sequence[tuple], start: int) -> Prepared:
        """`prepare_entries` of rows `start`… of those reserved: safe in another thread (no connection)."""
        return prepare_entries(part, self.reserved[start : start + len(part)])

    def write(self, part: Sequence[tuple], prepared: Prepared | None = None) -> None:
        """(tree, id, node, parent, leaf, ord, hash, body_hash, text, context, cite_json, src) rows of
        one tree, at most a batch (`pgbulk.BATCH`), with their `prepare`d postings (None: row ids are
        taken and the postings cut here)."""
        if not part:
            return
        self.tree = part[0][0]
        rids, lines, lengths = prepared if prepared is not None else prepare_entries(part, self._next_ids(len(part)))
        self.conn.copy_rows(
            "tree_index", ENTRY_INSERT, ((rid, *r, n) for rid, r, n in zip(rids, part, lengths, strict=True))
        )
        self.docs.update(copy_lines(self.conn, POSTINGS.terms, POSTINGS.key, self.tree, lines))
        self.tokens += sum(lengths)
        self.entries += len(part)

    def close(self) -> None:
        if self.tree is not None and self.entries:
            add_counts(self.conn, POSTINGS, self.tree, self.docs, self.entries, self.tokens)
        self.tree, self.docs, self.entries, self.tokens = None, Counter(), 0, 0


def insert_entries(conn: Any, rows: Iterable[tuple]) -> None:
    """(tree, id, node, parent, leaf, ord, hash, body_hash, text, context, cite_json, src) as new
    entries of one tree, with their postings; the per-tree statistics follow. Streamed: each batch
    of `pgbulk.BATCH` rows is cut into terms and COPYed (rows, then postings) before the next is read."""
    writer = EntryWriter(conn)
    for part in batches(rows):
        writer.write(part)
    writer.close()


def delete_entries(conn: Any, rids: Sequence[int], chunk: int = 500) -> None:
    """Delete entries with their postings; the statistics follow."""
    for part, marks in in_batches(list(rids), chunk):
        sizes = conn.execute(
            f"SELECT tree, COUNT(*), COALESCE(SUM(toklen), 0) FROM tree_index WHERE rid IN ({marks}) GROUP BY tree",
            part,
        ).fetchall()
        remove_postings(conn, POSTINGS, part, sizes)
        conn.execute(f"DELETE FROM tree_index WHERE rid IN ({marks})", part)


def rebuild_postings(conn: Any, tree: str, batch: int = 2000) -> None:
    """Derive a tree's postings, statistics and entry lengths afresh from its entry rows (after
    `db copy` wrote the rows without them: store/derived.py)."""
    drop_postings(conn, POSTINGS, tree)
    last = -1
    while rows := conn.execute(
        "SELECT rid, context, text FROM tree_index WHERE tree = ? AND rid > ? ORDER BY rid LIMIT ?",
        (tree, last, batch),
    ).fetchall():
        counted = count_terms([f"{r[1]}\n{r[2]}" if r[1] else r[2] for r in rows])
        conn.executemany(
            "UPDATE tree_index SET toklen = ? WHERE rid = ?",
            [(length, r[0]) for r, (_, length) in zip(rows, counted, strict=True)],
        )
        add_postings(conn, POSTINGS, tree, [r[0] for r in rows], counted)
        last = rows[-1][0]


def drop_tree(conn: Any, tree: str) -> None:
    """Forget a tree's index (its tree is gone), its own HNSW indexes with it."""
    pgbulk.drop_ann_indexes(conn, tree)
    drop_postings(conn, POSTINGS, tree)
    for table in ("tree_index", "tree_index_vec"):
        conn.execute(f"DELETE FROM {table} WHERE tree = ?", (tree,))
    conn.execute("DELETE FROM tree_index_state WHERE tree = ?", (tree,))


# -- lexical search ---------------------------------------------------------------------------------
def lexical(conn: Any, tree: str, terms: Sequence[str], limit: int) -> list[tuple[str, float]]:
    """(id, −BM25) of the `limit` best entries of `tree` holding any of the query words, best first."""
    query = weighted_query(conn, POSTINGS, tree, terms)
    if query is None:
        return []
    args, scored = query
    return [
        (r[0], -float(r[1]))
        for r in conn.execute(
            f"SELECT t.id, s.score FROM ({scored} GROUP BY p.rid ORDER BY score DESC, p.rid LIMIT ?) s"
            " JOIN tree_index t ON t.rid = s.rid ORDER BY s.score DESC, s.rid",
            (*args, limit),
        ).fetchall()
    ]


def lexical_top(conn: Any, tree: str, terms: Sequence[str], limit: int) -> list[tuple[str, float]]:
    """`lexical` (the tree's postings are read alone here: no filter to move)."""
    return lexical(conn, tree, terms, limit)


def term_docs_key(conn: Any, tree: str) -> tuple[object, int]:
    """(None, 0): `term_docs` reads its counts from the statistics tables (one small read), nothing to
    keep between questions (`treeindex_sqlite.term_docs_key` has one)."""
    return None, 0


def term_docs(conn: Any, tree: str, terms: Sequence[str]) -> tuple[dict[str, int], int]:
    """({query word: entries of `tree` holding its token}, the tree's entries): what BM25's idf is made of."""
    cut = fts_token_lists(list(terms))
    one = {t: tokens[0] for t, tokens in zip(terms, cut, strict=True) if len(tokens) == 1}
    docs, n, _ = stats(conn, POSTINGS, tree, list(one.values()))
    return {t: docs.get(token, 0) for t, token in one.items()}, n


# -- vectors ----------------------------------------------------------------------------------------
def put_vectors(conn: Any, rows: Iterable[tuple[str, str, str, str, bytes]]) -> None:
    """(tree, id, embedder, hash, vec): stored (bytes, and as a pgvector value), replacing an older
    one; streamed in batches through a staging table, the vectors in COPY's binary format."""
    staged_upsert_binary(
        conn,
        "tree_index_vec",
        ("tree", "id", "embedder", "hash", "vec", "emb"),
        vector_tuples(rows),
        "ON CONFLICT (tree, embedder, id) DO UPDATE SET hash = excluded.hash, vec = excluded.vec, emb = excluded.emb",
    )


def fill_vectors(conn: Any, tree: str, batch: int = 2000) -> int:
    """Give every stored vector of `tree` that holds only its bytes its pgvector value, from them
    (`db copy` writes the columns both dialects have: an SQLite file's vectors arrive without
    `emb`, which the HNSW index, `ann_top` and `cosines` read); returns how many. By the primary
    key's order, from where the last batch ended: run again, it goes on where it stopped."""
    done = 0
    last: tuple[str, str] | None = None
    while True:
        after = " AND (embedder, id) > (?, ?)" if last is not None else ""
        rows = conn.execute(
            f"SELECT tree, id, embedder, hash, vec FROM tree_index_vec WHERE tree = ? AND emb IS NULL{after}"
            " ORDER BY tree, embedder, id LIMIT ?",
            (tree, *(last or ()), batch),
        ).fetchall()
        if not rows:
            return done
        put_vectors(conn, [(t, i, e, h, bytes(v)) for t, i, e, h, v in rows])
        done += len(rows)
        last = (rows[-1][2], rows[-1][1])


def set_leaf_counts(conn: Any, rows: Iterable[tuple[int, int]]) -> None:
    """(leaves, rid): how many leaf entries lie below each inner entry, one UPDATE per 50,000 rows
    (arrays joined by rid) where an UPDATE per row cost ~150,000 statements at 10^6 leaves."""
    for part in batches(rows, 50_000):
        conn.execute(
            "UPDATE tree_index t SET leaves = v.n FROM unnest(?::int[], ?::bigint[]) AS v(n, rid)"
            " WHERE t.rid = v.rid",
            ([r[0] for r in part], [r[1] for r in part]),
        )


def vectors_by_hash(conn: Any, tree: str, embedder: str, hashes: Sequence[str]) -> list[tuple[str, bytes]]:
    """(hash, vec) of stored vectors by `embedder` of these texts (a text is never embedded twice):
    one join with the hashes as an array (no hash column index: the tree's vectors are read once,
    not once per 500 hashes)."""
    if not hashes:
        return []
    return [
        (h, bytes(v))
        for h, v in conn.execute(
            "SELECT v.hash, v.vec FROM tree_index_vec v JOIN unnest(?::text[]) AS q(hash) ON v.hash = q.hash"
            " WHERE v.tree = ? AND v.embedder = ?",
            (list(hashes), tree, embedder),
        ).fetchall()
    ]


def drop_orphan_vectors(conn: Any, tree: str, embedder: str | None = None) -> None:
    """Vectors whose entries are gone (kept only for reuse by text), of one embedder or of all: an
    anti-join (SQLite's `NOT IN (subquery)` is, here, a hashed subplan only while the tree's ids fit
    in `work_mem`, and past that a scan of every id for every vector: quadratic in the tree)."""
    which = "" if embedder is None else " AND v.embedder = ?"
    conn.execute(
        f"DELETE FROM tree_index_vec v WHERE v.tree = ?{which} AND NOT EXISTS"
        " (SELECT 1 FROM tree_index t WHERE t.tree = v.tree AND t.id = v.id)",
        (tree, *(() if embedder is None else (embedder,))),
    )


def iter_node_rows(conn: Any, tree: str, batch: int = 2000) -> Iterator[tuple]:
    """`node_rows`, streamed by a server-side cursor (no result of every row held at once)."""
    with conn.raw.cursor(name="kt_node_rows") as cur:
        cur.itersize = batch
        cur.execute(f"SELECT {NODE_COLUMNS} FROM nodes WHERE tree = %s", (tree,))
        yield from cur


def will_build_ann_index(conn: Any, tree: str, embedder: str, dim: int) -> None:
    """Called before a save that may build `tree`'s HNSW index writes any vector: when it has none yet,
    index builds are held off for the rest of the transaction (`pgbulk.hold_ann_builds`)."""
    if dim in ANN_DIMS and not pgbulk.has_ann_index(conn, tree, embedder, dim):
        pgbulk.hold_ann_builds(conn)


def ensure_ann_index(conn: Any, tree: str, embedder: str, dim: int) -> bool:
    """Give `tree` its own HNSW index over its vectors by `embedder` (`pgbulk.ensure_ann_index`),
    built once its vectors are written; True when built now. A size without an index (`ANN_DIMS`):
    nothing (the exact path)."""
    if dim not in ANN_DIMS:
        return False
    count = conn.execute(
        "SELECT COUNT(*) FROM tree_index_vec WHERE tree = ? AND embedder = ?", (tree, embedder)
    ).fetchone()[0]
    return pgbulk.ensure_ann_index(conn, tree, embedder, dim, int(count))


#: the dimensions with an HNSW index over `tree_index_vec.emb` (migration: branch scale2); a vector of
#: another size is searched by the exact path
ANN_DIMS: tuple[int, ...] = (256, 384, 512, 768, 1024, 1536)
EF_MIN = 64  # hnsw.ef_search at the least (pgvector's default: 40); k when larger, up to its 1,000


def vector_literal(query: Any) -> str:
    return "[" + ",".join(map(repr, [float(x) for x in query])) + "]"


def ann_top(conn: Any, tree: str, embedder: str, query: Any, k: int) -> list[tuple[str, str, float]] | None:
    """(id, vector's text hash, cosine) of `tree`'s `k` vectors nearest `query` (unit vectors: cosine
    = inner product) by the tree's own HNSW index (`ensure_ann_index`; None when it has none: the
    caller scores exactly). `hnsw.ef_search` follows k; `hnsw.iterative_scan = relaxed_order` scans
    on where the graph's first candidates are too few (up to `hnsw.max_scan_tuples`, 20,000 by
    default). The query repeats the index's predicate (the tree and embedder as literals: a bound
    parameter cannot prove a partial index's predicate), so no other tree's vectors are in its graph.
    No join with `tree_index` (400 index lookups, a third of the statement): the caller keeps a
    vector only where its hash is its entry's current text's, from the rows it reads anyway. Not
    ordered: the caller sorts."""
    dim = len(query)
    if dim not in ANN_DIMS:
        raise ValueError(f"no HNSW index for {dim}-dimensional vectors")
    if not pgbulk.has_ann_index(conn, tree, embedder, dim):
        return None
    where = pgbulk.ann_predicate(conn, tree, embedder, dim, "v")
    # in a savepoint rolled back after the read: its settings (SET LOCAL) end with it, so the
    # question's other reads, in the same transaction (`TreeIndex.in_one_read`), plan as usual
    with conn.raw.transaction(force_rollback=True):
        # the caller chose this path by the tree's size (`retrieve.treeindex.ann_entries`); the planner,
        # whose estimate of a tree filter's rows is poor (and none before an ANALYZE), would otherwise
        # often read every row of the tree and sort them: enable_sort off (three settings, one statement)
        conn.execute(
            "SELECT set_config('hnsw.ef_search', ?, true), set_config('hnsw.iterative_scan', 'relaxed_order',"
            " true), set_config('enable_sort', 'off', true)",
            (str(min(1000, max(EF_MIN, int(k)))),),
        )
        rows = conn.execute(
            f"SELECT v.id, v.hash, -(v.emb::vector({dim}) <#> ?::vector({dim})) FROM tree_index_vec v"
            f" WHERE {where} ORDER BY v.emb::vector({dim}) <#> ?::vector({dim}) LIMIT ?",
            (vector_literal(query), vector_literal(query), int(k)),
        ).fetchall()
    return [(str(i), str(h), float(c)) for i, h, c in rows]


def cosines(conn: Any, tree: str, embedder: str, query: Any, wanted: Mapping[str, str]) -> list[tuple[str, float]]:
    """(id, cosine with `query`) of the entries named in `wanted` (id: the hash of its current text,
    `IndexRow.hash`) whose vector by `embedder` is of that text. One statement whatever the count
    (the ids as one array: a text psycopg parses and prepares once), and no join with `tree_index`:
    the caller has read the entries, so the current-text check is a comparison here."""
    if not wanted:
        return []
    rows = conn.execute(
        "SELECT id, hash, -(emb <#> ?::vector) FROM tree_index_vec WHERE tree = ? AND embedder = ?"
        " AND id = ANY(?::text[])",
        (vector_literal(query), tree, embedder, list(wanted)),
    ).fetchall()
    return [(str(i), float(c)) for i, h, c in rows if wanted.get(i) == h]


def rows_by_id(conn: Any, tree: str, ids: Sequence[str]) -> list[tuple]:
    """The entries named (`ENTRY_COLUMNS`), in no particular order: one statement, the ids as an
    array (SQLite's `IN (?, ?, …)` in batches of 500 is a new text for every count, which psycopg
    parses anew and never prepares: ~5 ms of a 10^5-leaf tree's question)."""
    if not ids:
        return []
    return conn.execute(
        f"SELECT {ENTRY_COLUMNS} FROM tree_index WHERE tree = ? AND id = ANY(?::text[])", (tree, list(ids))
    ).fetchall()


def sample_median(conn: Any, tree: str, embedder: str, query: Any, n: int) -> float | None:
    """The median cosine of `query` over `vector_sample(…, n)`'s vectors, computed by the database:
    the element at position len // 2 of the sorted cosines, as numpy's `partition` takes it there
    (the same value to float32 rounding). None when the tree has no vector. What a process's first
    question reads instead of the sample itself (2,048 vectors: 25-40 ms on a cold connection)."""
    row = conn.execute(
        "SELECT s FROM (SELECT s, row_number() OVER (ORDER BY s) AS n, count(*) OVER () AS c FROM"
        " (SELECT -(emb <#> ?::vector) AS s FROM tree_index_vec WHERE tree = ? AND embedder = ?"
        " ORDER BY id LIMIT ?) AS sample) AS ranked WHERE n = c / 2 + 1",
        (vector_literal(query), tree, embedder, int(n)),
    ).fetchone()
    return None if row is None else float(row[0])


def vector_sample(conn: Any, tree: str, embedder: str, n: int) -> list[bytes]:
    """`n` of the tree's vectors, always the same ones for the same entries: the first by id (ids are
    content hashes, so these are spread over the tree), read by the primary key's order."""
    return [
        bytes(r[0])
        for r in conn.execute(
            "SELECT vec FROM tree_index_vec WHERE tree = ? AND embedder = ? ORDER BY id LIMIT ?",
            (tree, embedder, int(n)),
        ).fetchall()
    ]


__all__ = [
    "ANN_DIMS",
    "ENTRY_COLUMNS",
    "EntryWriter",
    "ann_top",
    "cosines",
    "current_vectors",
    "delete_entries",
    "doc_lines",
    "drop_orphan_vectors",
    "drop_tree",
    "drop_vectors",
    "ensure_ann_index",
    "entry_rows",
    "fill_vectors",
    "fts_tokens",
    "index_sizes",
    "indexed",
    "insert_entries",
    "iter_node_rows",
    "lexical",
    "lexical_top",
    "links",
    "move",
    "node_rows",
    "prepare_entries",
    "put_vectors",
    "read_state",
    "rebuild_postings",
    "repoint",
    "rows_by_id",
    "sample_median",
    "set_leaf_counts",
    "set_signature",
    "term_docs",
    "term_docs_key",
    "tree_head",
    "unembedded",
    "vector_sample",
    "vectors",
    "vectors_by_hash",
    "will_build_ann_index",
    "write_state",
]
