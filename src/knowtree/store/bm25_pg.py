"""SQLite FTS5's BM25, computed in PostgreSQL from postings: shared by the tree index
(store/treeindex_pg.py) and the flat passage indexes (store/flatindex_pg.py).

Every text is cut into terms as FTS5's `porter unicode61 remove_diacritics 2` tokenizer cuts it
(`fts_token_lists`: by that very tokenizer, in an in-memory SQLite; PyStemmer's 'porter' differed
from FTS5's on 34 of 160 FinanceBench pages, e.g. technologi/technolog). A set of `Postings` tables
holds, per index key (a tree, a named flat index): `terms(key, term, rid, tf, len)` (a term's count
in a row, the row's length in tokens), `df(key, term, docs)` and `stats(key, entries, tokens)`. The
tree index keeps its postings in blocks instead (`Postings.blocks`: a row per term and block of row
ids, the three columns as arrays; store/bm25_blocks.py), read as the same (rid, tf, len) rows.
A query's score is FTS5's:

    bm25(e) = Σ_terms idf(t) · tf·(k1 + 1) / (tf + k1·(1 − b + b·len(e)/avgdl)),  k1 = 1.2, b = 0.75
    idf(t) = ln((N − n_t + 0.5) / (n_t + 0.5)), 1e-6 where that is ≤ 0

summed in SQL over the query terms' postings only (`score_sql`), `ORDER BY score DESC, rid LIMIT k`
(FTS5's ties: stored order).
"""

from __future__ import annotations

import math
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from knowtree.store import bm25_blocks
from knowtree.store.fts_terms import create_tokenizer
from knowtree.store.pgbulk import staged_upsert
from knowtree.store.rows import in_batches

K1 = 1.2
BULK_ROWS = 2000  # more rows than this are upserted through a staging table (store/pgbulk.py)
B = 0.75


@dataclass(frozen=True)
class Postings:
    """The names of one index family's posting tables and of their key column (the caller's own
    names, never user input)."""

    terms: str
    df: str
    stats: str
    key: str
    #: `terms(key, term, seg, rids, tfs, lens)`, a row per term and block (store/bm25_blocks.py)
    blocks: bool = False


def fts_token_lists(texts: Sequence[str]) -> list[list[str]]:
    """Each text's terms in order, cut by SQLite's own FTS5 tokenizer (`porter unicode61
    remove_diacritics 2`, the SQLite indexes'): the same terms by construction."""
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


def count_terms(texts: Sequence[str]) -> list[tuple[Counter[str], int]]:
    """Each text's (term counts, length in tokens): `fts_token_lists`' terms, counted by SQLite
    (no per-text sort by offset: the order of a text's terms is not needed for counting)."""
    conn = sqlite3.connect(":memory:")
    try:
        create_tokenizer(conn)
        conn.executemany("INSERT INTO cut(rowid, body) VALUES (?, ?)", enumerate(texts))
        out: list[Counter[str]] = [Counter() for _ in texts]
        for doc, term, n in conn.execute("SELECT doc, term, COUNT(*) FROM cut_terms GROUP BY doc, term"):
            out[doc][term] = n
    finally:
        conn.close()
    return [(c, c.total()) for c in out]


def add_postings(
    conn: Any, p: Postings, key: str, rids: Sequence[int], counted: Sequence[tuple[Counter[str], int]]
) -> None:
    """Store the postings of new rows (`rids`, each with its `count_terms`), and the statistics."""
    copy_postings(conn, p, key, rids, counted)
    docs = Counter(term for terms, _ in counted for term in terms)
    add_counts(conn, p, key, docs, len(rids), sum(length for _, length in counted))


def copy_postings(
    conn: Any, p: Postings, key: str, rids: Sequence[int], counted: Sequence[tuple[Counter[str], int]]
) -> None:
    """COPY the postings of new rows (bulk: several times faster than INSERTs); no statistics."""
    if p.blocks:
        bm25_blocks.copy_blocks(conn, p.terms, p.key, key, bm25_blocks.blocks_of_counts(rids, counted))
        return
    postings = (
        (key, term, rid, tf, length)
        for rid, (terms, length) in zip(rids, counted, strict=True)
        for term, tf in terms.items()
    )
    conn.copy_rows(p.terms, (p.key, "term", "rid", "tf", "len"), postings)


def add_counts(conn: Any, p: Postings, key: str, docs: Counter[str], entries: int, tokens: int) -> None:
    """Add new rows' share of the statistics: `docs` {term: rows holding it}, the rows, their tokens."""
    _add_df(conn, p, key, docs, +1)
    _add_stats(conn, p, key, entries, tokens)


def remove_postings(
    conn: Any, p: Postings, rids: Sequence[int], sizes: Sequence[tuple[str, int, int]]
) -> None:
    """Delete the postings of rows about to go (at most 500 `rids`), and their share of the
    statistics: `sizes` (key, rows, tokens) of those rows, read by the caller from its row table."""
    part, marks = list(rids), ",".join("?" * len(rids))
    if not part:
        return
    by_key: dict[str, Counter[str]] = {}
    if p.blocks:
        by_key = bm25_blocks.remove_from_blocks(conn, p.terms, p.key, part)
    else:
        for key, term in conn.execute(
            f"SELECT {p.key}, term FROM {p.terms} WHERE rid IN ({marks})", part
        ).fetchall():
            by_key.setdefault(key, Counter())[term] += 1
    for key, docs in by_key.items():
        _add_df(conn, p, key, docs, -1)
    for key, n, tokens in sizes:
        _add_stats(conn, p, key, -int(n), -int(tokens))
    if not p.blocks:
        conn.execute(f"DELETE FROM {p.terms} WHERE rid IN ({marks})", part)


def drop_postings(conn: Any, p: Postings, key: str) -> None:
    """Forget every posting and statistic of `key`."""
    for table in (p.terms, p.df, p.stats):
        conn.execute(f"DELETE FROM {table} WHERE {p.key} = ?", (key,))


def _add_df(conn: Any, p: Postings, key: str, docs: Counter[str], sign: int) -> None:
    conflict = f"ON CONFLICT ({p.key}, term) DO UPDATE SET docs = {p.df}.docs + excluded.docs"
    rows = [(key, term, sign * n) for term, n in sorted(docs.items())]  # in term order: no deadlock
    if len(rows) > BULK_ROWS:  # a large tree's terms: COPYed to a staging table, upserted in term order
        staged_upsert(conn, p.df, (p.key, "term", "docs"), rows, conflict, order="term")
        return
    conn.executemany(f"INSERT INTO {p.df}({p.key}, term, docs) VALUES (?, ?, ?) {conflict}", rows)


def _add_stats(conn: Any, p: Postings, key: str, entries: int, tokens: int) -> None:
    conn.execute(
        f"INSERT INTO {p.stats}({p.key}, entries, tokens) VALUES (?, ?, ?) ON CONFLICT ({p.key}) DO UPDATE"
        f" SET entries = {p.stats}.entries + excluded.entries, tokens = {p.stats}.tokens + excluded.tokens",
        (key, entries, tokens),
    )


def query_tokens(terms: Sequence[str]) -> list[str]:
    """A query's phrases as FTS5 reads `"a" OR "b"`: each word's one token (a word of several tokens,
    a phrase in FTS5, is left out here)."""
    return [tokens[0] for tokens in fts_token_lists(list(terms)) if len(tokens) == 1]


def stats(conn: Any, p: Postings, key: str, tokens: Sequence[str]) -> tuple[dict[str, int], int, float]:
    """({token: rows of `key` holding it}, the rows of `key`, their average length)."""
    found: dict[str, int] = {}
    for part, marks in in_batches(sorted(set(tokens)), 500):
        found.update(
            conn.execute(
                f"SELECT term, docs FROM {p.df} WHERE {p.key} = ? AND term IN ({marks})", (key, *part)
            ).fetchall()
        )
    row = conn.execute(f"SELECT entries, tokens FROM {p.stats} WHERE {p.key} = ?", (key,)).fetchone()
    n, tokens_all = (int(row[0]), int(row[1])) if row else (0, 0)
    return {k: int(v) for k, v in found.items()}, n, (tokens_all / n if n else 0.0)


def idf(entries: int, holding: int) -> float:
    """FTS5's idf: ln((N − n + 0.5) / (n + 0.5)), 1e-6 where that is not positive."""
    value = math.log((entries - holding + 0.5) / (holding + 0.5)) if entries else 0.0
    return value if value > 0 else 1e-6


def weighted_query(conn: Any, p: Postings, key: str, terms: Sequence[str]) -> tuple[list[object], str] | None:
    """The `score_sql` arguments for a query's words against `key` (None: nothing can match), and
    the SUM expression of FTS5's BM25 over postings `p` (alias) joined to the query `q(term, w)`."""
    tokens = query_tokens(terms)
    if not tokens:
        return None
    docs, n, avgdl = stats(conn, p, key, tokens)
    if not n or avgdl <= 0:
        return None
    weights = [idf(n, docs.get(t, 0)) for t in tokens]
    args: list[object] = [K1 + 1, K1, 1 - B, B, avgdl, tokens, weights, key]
    source = (
        bm25_blocks.score_from(p.terms, p.key)
        if p.blocks
        else f" FROM {p.terms} p JOIN unnest(?::text[], ?::float8[]) AS q(term, w) ON p.term = q.term WHERE p.{p.key} = ?"
    )
    return args, f"SELECT p.rid, SUM(q.w * p.tf * ? / (p.tf + ? * (? + ? * p.len / ?))) AS score{source}"


__all__ = [
    "K1",
    "B",
    "Postings",
    "add_counts",
    "add_postings",
    "copy_postings",
    "count_terms",
    "drop_postings",
    "fts_token_lists",
    "fts_tokens",
    "idf",
    "query_tokens",
    "remove_postings",
    "stats",
    "weighted_query",
]
