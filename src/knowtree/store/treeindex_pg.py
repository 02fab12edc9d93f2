"""The tree index's tables on PostgreSQL: the functions of `store.treeindex_sqlite` (same names, same
meaning), with BM25 computed in SQL the way SQLite's FTS5 computes it, and vectors in pgvector.

Lexical search. `ts_rank` is not BM25, so the index keeps its own postings: every entry's text
(`body`: context, newline, text) is cut into terms as FTS5's `porter unicode61 remove_diacritics 2`
tokenizer cuts it (`fts_token_lists`: by that very tokenizer, in an in-memory SQLite; PyStemmer's
'porter' differed from FTS5's on 34 of 160 FinanceBench pages, e.g. technologi/technolog), stored
as `tree_index_terms(tree, term, rid, tf, len)`; `tree_index_df(tree, term, docs)` and
`tree_index_stats(tree, entries, tokens)` hold the statistics. A query's score is FTS5's:

    bm25(e) = Σ_terms idf(t) · tf·(k1 + 1) / (tf + k1·(1 − b + b·len(e)/avgdl)),  k1 = 1.2, b = 0.75
    idf(t) = ln((N − n_t + 0.5) / (n_t + 0.5)), 1e-6 where that is ≤ 0

with N, n_t and avgdl those of the tree searched (FTS5's are its table's, every tree of the SQLite
file: equal for a file of one tree, and here no tree's ranking depends on another's, a tenant's on
another tenant's), summed in SQL over the query terms' postings only, `ORDER BY score LIMIT k`. Returned negated, as
FTS5's `bm25()` is (lower is better).

Vectors: `tree_index_vec.emb` holds each vector as a pgvector value beside its bytes.
"""

from __future__ import annotations

import math
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from knowtree.store.fts_terms import create_tokenizer
from knowtree.store.rows import in_batches
from knowtree.store.treeindex_sqlite import (
    ENTRY_COLUMNS,
    current_vectors,
    doc_lines,
    drop_orphan_vectors,
    drop_vectors,
    entry_rows,
    indexed,
    links,
    move,
    node_rows,
    read_state,
    repoint,
    rows_by_id,
    set_leaf_counts,
    set_signature,
    tree_head,
    unembedded,
    vectors,
    vectors_by_hash,
    write_state,
)

K1 = 1.2
B = 0.75


def fts_token_lists(texts: Sequence[str]) -> list[list[str]]:
    """Each text's terms in order, cut by SQLite's own FTS5 tokenizer (`porter unicode61
    remove_diacritics 2`, the SQLite index's): the same terms by construction."""
    conn = sqlite3.connect(":memory:")
    try:
        create_tokenizer(conn)
        conn.executemany("INSERT INTO cut(rowid, body) VALUES (?, ?)", list(enumerate(texts)))
        out: list[list[tuple[int, str]]] = [[] for _ in texts]
        for doc, term, offset in conn.execute("SELECT doc, term, offset FROM cut_terms"):
            out[doc].append((offset, term))
    finally:
        conn.close()
    return [[t for _, t in sorted(terms)] for terms in out]


def fts_tokens(text: str) -> list[str]:
    """`text` as FTS5's `porter unicode61 remove_diacritics 2` tokenizer indexes it."""
    return fts_token_lists([text])[0]


# -- writing entries: their postings and the statistics with them ---------------------------------
def insert_entries(conn: Any, rows: Sequence[tuple]) -> None:
    """(tree, id, node, parent, leaf, ord, hash, body_hash, text, context, cite_json, src) as new
    entries, with their postings; the per-tree statistics follow."""
    if not rows:
        return
    counted = [
        (Counter(tokens), len(tokens))
        for tokens in fts_token_lists([f"{r[9]}\n{r[8]}" if r[9] else r[8] for r in rows])
    ]
    conn.executemany(
        "INSERT INTO tree_index(tree, id, node, parent, leaf, ord, hash, body_hash, text, context,"
        " cite_json, src, toklen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(*r, length) for r, (_, length) in zip(rows, counted, strict=True)],
    )
    tree = rows[0][0]
    rid: dict[str, int] = {}
    for part, marks in in_batches([r[1] for r in rows], 500):
        rid.update(
            conn.execute(f"SELECT id, rid FROM tree_index WHERE tree = ? AND id IN ({marks})", (tree, *part))
        )
    got = [rid[r[1]] for r in rows]
    postings = [
        (tree, term, rid, tf, length)
        for rid, (terms, length) in zip(got, counted, strict=True)
        for term, tf in terms.items()
    ]
    conn.executemany(
        "INSERT INTO tree_index_terms(tree, term, rid, tf, len) VALUES (?, ?, ?, ?, ?)", postings
    )
    docs = Counter(term for terms, _ in counted for term in terms)
    _add_df(conn, tree, docs, +1)
    _add_stats(conn, tree, len(rows), sum(length for _, length in counted))


def _add_df(conn: Any, tree: str, docs: Counter[str], sign: int) -> None:
    conn.executemany(
        "INSERT INTO tree_index_df(tree, term, docs) VALUES (?, ?, ?)"
        " ON CONFLICT (tree, term) DO UPDATE SET docs = tree_index_df.docs + excluded.docs",
        [(tree, term, sign * n) for term, n in sorted(docs.items())],  # in term order: no deadlock
    )


def _add_stats(conn: Any, tree: str, entries: int, tokens: int) -> None:
    conn.execute(
        "INSERT INTO tree_index_stats(tree, entries, tokens) VALUES (?, ?, ?) ON CONFLICT (tree) DO UPDATE"
        " SET entries = tree_index_stats.entries + excluded.entries,"
        " tokens = tree_index_stats.tokens + excluded.tokens",
        (tree, entries, tokens),
    )


def delete_entries(conn: Any, rids: Sequence[int], chunk: int = 500) -> None:
    """Delete entries with their postings; the statistics follow."""
    for part, marks in in_batches(list(rids), chunk):
        rows = conn.execute(
            f"SELECT tree, term, len FROM tree_index_terms WHERE rid IN ({marks})", part
        ).fetchall()
        by_tree: dict[str, Counter[str]] = {}
        for tree, term, _ in rows:
            by_tree.setdefault(tree, Counter())[term] += 1
        for tree, docs in by_tree.items():
            _add_df(conn, tree, docs, -1)
        sizes = conn.execute(
            f"SELECT tree, COUNT(*), COALESCE(SUM(toklen), 0) FROM tree_index WHERE rid IN ({marks}) GROUP BY tree",
            part,
        ).fetchall()
        for tree, n, tokens in sizes:
            _add_stats(conn, tree, -int(n), -int(tokens))
        conn.execute(f"DELETE FROM tree_index_terms WHERE rid IN ({marks})", part)
        conn.execute(f"DELETE FROM tree_index WHERE rid IN ({marks})", part)


def drop_tree(conn: Any, tree: str) -> None:
    """Forget a tree's index (its tree is gone)."""
    for table in ("tree_index_terms", "tree_index_df", "tree_index_stats", "tree_index", "tree_index_vec"):
        conn.execute(f"DELETE FROM {table} WHERE tree = ?", (tree,))
    conn.execute("DELETE FROM tree_index_state WHERE tree = ?", (tree,))


# -- lexical search ---------------------------------------------------------------------------------
def _query(terms: Sequence[str]) -> list[str]:
    """A query's phrases as FTS5 reads `"a" OR "b"`: each word's one token (a word of several tokens,
    a phrase in FTS5, is left out here)."""
    return [tokens[0] for tokens in fts_token_lists(list(terms)) if len(tokens) == 1]


def _stats(conn: Any, tree: str, tokens: Sequence[str]) -> tuple[dict[str, int], int, float]:
    """({token: entries of `tree` holding it}, the tree's entries, their average length)."""
    found: dict[str, int] = {}
    for part, marks in in_batches(sorted(set(tokens)), 500):
        found.update(
            conn.execute(
                f"SELECT term, docs FROM tree_index_df WHERE tree = ? AND term IN ({marks})", (tree, *part)
            ).fetchall()
        )
    row = conn.execute("SELECT entries, tokens FROM tree_index_stats WHERE tree = ?", (tree,)).fetchone()
    n, tokens_all = (int(row[0]), int(row[1])) if row else (0, 0)
    return {k: int(v) for k, v in found.items()}, n, (tokens_all / n if n else 0.0)


def idf(entries: int, holding: int) -> float:
    """FTS5's idf: ln((N − n + 0.5) / (n + 0.5)), 1e-6 where that is not positive."""
    value = math.log((entries - holding + 0.5) / (holding + 0.5)) if entries else 0.0
    return value if value > 0 else 1e-6


def lexical(conn: Any, tree: str, terms: Sequence[str], limit: int) -> list[tuple[str, float]]:
    """(id, −BM25) of the `limit` best entries of `tree` holding any of the query words, best first."""
    tokens = _query(terms)
    if not tokens:
        return []
    docs, n, avgdl = _stats(conn, tree, tokens)
    weights = [idf(n, docs.get(t, 0)) for t in tokens]
    if not n or avgdl <= 0:
        return []
    return [
        (r[0], -float(r[1]))
        for r in conn.execute(
            "SELECT t.id, s.score FROM (SELECT p.rid, SUM(q.w * p.tf * ? / (p.tf + ? * (? + ? * p.len / ?)))"
            " AS score FROM tree_index_terms p JOIN unnest(?::text[], ?::float8[]) AS q(term, w)"
            " ON p.term = q.term WHERE p.tree = ? GROUP BY p.rid ORDER BY score DESC, p.rid LIMIT ?) s"
            " JOIN tree_index t ON t.rid = s.rid ORDER BY s.score DESC, s.rid",
            (K1 + 1, K1, 1 - B, B, avgdl, tokens, weights, tree, limit),
        ).fetchall()
    ]


def lexical_top(conn: Any, tree: str, terms: Sequence[str], limit: int) -> list[tuple[str, float]]:
    """`lexical` (the tree's postings are read alone here: no filter to move)."""
    return lexical(conn, tree, terms, limit)


def term_docs(conn: Any, tree: str, terms: Sequence[str]) -> tuple[dict[str, int], int]:
    """({query word: entries of `tree` holding its token}, the tree's entries): what BM25's idf is made of."""
    cut = fts_token_lists(list(terms))
    one = {t: tokens[0] for t, tokens in zip(terms, cut, strict=True) if len(tokens) == 1}
    docs, n, _ = _stats(conn, tree, list(one.values()))
    return {t: docs.get(token, 0) for t, token in one.items()}, n


# -- vectors ----------------------------------------------------------------------------------------
def put_vectors(conn: Any, rows: Iterable[tuple[str, str, str, str, bytes]]) -> None:
    """(tree, id, embedder, hash, vec): stored (bytes, and as a pgvector value), replacing an older one."""
    import numpy as np

    conn.executemany(
        "INSERT INTO tree_index_vec(tree, id, embedder, hash, vec, emb) VALUES (?, ?, ?, ?, ?, ?::vector)"
        " ON CONFLICT (tree, embedder, id) DO UPDATE SET hash = excluded.hash, vec = excluded.vec,"
        " emb = excluded.emb",
        [(*r, "[" + ",".join(map(repr, np.frombuffer(r[4], dtype=np.float32).tolist())) + "]") for r in rows],
    )


#: the dimensions with an HNSW index over `tree_index_vec.emb` (migration: branch scale2); a vector of
#: another size is searched by the exact path
ANN_DIMS: tuple[int, ...] = (256, 384, 512, 768, 1024, 1536)
EF_MIN = 64  # hnsw.ef_search at the least (pgvector's default: 40); k when larger, up to its 1,000


def _vector(query: Any) -> str:
    return "[" + ",".join(map(repr, [float(x) for x in query])) + "]"


def ann_top(conn: Any, tree: str, embedder: str, query: Any, k: int) -> list[tuple[str, float]]:
    """(id, cosine) of `tree`'s `k` entries nearest `query` (unit vectors: cosine = inner product) by
    the HNSW index of their dimension, vectors of the entries' current text only. `hnsw.ef_search`
    follows k; `hnsw.iterative_scan = relaxed_order` goes on scanning the graph while the tree filter
    (and the current-text join) leave fewer than k rows, so another tree's vectors cannot starve the
    result (up to `hnsw.max_scan_tuples`, 20,000 by default). Not ordered: the caller sorts."""
    dim = len(query)
    if dim not in ANN_DIMS:
        raise ValueError(f"no HNSW index for {dim}-dimensional vectors")
    conn.execute(f"SET LOCAL hnsw.ef_search = {min(1000, max(EF_MIN, int(k)))}")
    conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
    # the caller chose this path by the tree's size (`retrieve.treeindex.ann_entries`); the planner,
    # whose estimate of a tree filter's rows is poor (and none before an ANALYZE), would otherwise
    # often read every row of the tree and sort them
    conn.execute("SET LOCAL enable_sort = off")
    rows = conn.execute(
        f"SELECT v.id, -(v.emb::vector({dim}) <#> ?::vector({dim})) FROM tree_index_vec v"
        " JOIN tree_index t ON t.tree = v.tree AND t.id = v.id AND t.body_hash = v.hash"
        f" WHERE v.tree = ? AND v.embedder = ? AND vector_dims(v.emb) = {dim}"
        f" ORDER BY v.emb::vector({dim}) <#> ?::vector({dim}) LIMIT ?",
        (_vector(query), tree, embedder, _vector(query), int(k)),
    ).fetchall()
    return [(str(i), float(c)) for i, c in rows]


def cosines(conn: Any, tree: str, embedder: str, query: Any, ids: Sequence[str]) -> list[tuple[str, float]]:
    """(id, cosine with `query`) of the entries named that have a vector of their current text."""
    out: list[tuple[str, float]] = []
    for part, marks in in_batches(list(ids), 500):
        out += conn.execute(
            "SELECT v.id, -(v.emb <#> ?::vector) FROM tree_index_vec v JOIN tree_index t ON t.tree = v.tree"
            f" AND t.id = v.id AND t.body_hash = v.hash WHERE v.tree = ? AND v.embedder = ? AND v.id IN ({marks})",
            (_vector(query), tree, embedder, *part),
        ).fetchall()
    return [(str(i), float(c)) for i, c in out]


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
    "ann_top",
    "cosines",
    "current_vectors",
    "delete_entries",
    "doc_lines",
    "drop_orphan_vectors",
    "drop_tree",
    "drop_vectors",
    "entry_rows",
    "fts_tokens",
    "indexed",
    "insert_entries",
    "lexical",
    "lexical_top",
    "links",
    "move",
    "node_rows",
    "put_vectors",
    "read_state",
    "repoint",
    "rows_by_id",
    "set_leaf_counts",
    "set_signature",
    "term_docs",
    "tree_head",
    "unembedded",
    "vector_sample",
    "vectors",
    "vectors_by_hash",
    "write_state",
]
