"""Temporary FTS5 tables that cut text into terms exactly as the tree index's tokenizer does: the
query's words and their entry counts on SQLite (store/treeindex_sqlite.py), a text's terms for
PostgreSQL's postings (store/treeindex_pg.py, cut and grouped into blocks of row ids here:
`cut_blocks`), so BM25 is FTS5's on both backends."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

from knowtree.store.bm25_blocks import block_line, copy_text
from knowtree.store.migrations import LEXICAL_TOKENIZER
from knowtree.store.migrations_postings import BLOCK_BITS

if TYPE_CHECKING:
    import numpy as np


def create_term_lookup(conn: sqlite3.Connection) -> None:
    """Create (if missing) this connection's temporary tables that read a query's words as the tree
    index's FTS5 tokenizer cuts them and how many entries hold each (store/treeindex_sqlite.py)."""
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.kt_query_terms USING fts5(term, tokenize = "
        f"'{LEXICAL_TOKENIZER}')"
    )
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.kt_query_vocab USING fts5vocab(temp, kt_query_terms, instance)"
    )
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.kt_index_vocab USING fts5vocab(main, tree_index_fts, row)"
    )


def create_tokenizer(conn: sqlite3.Connection) -> None:
    """Create, in a connection of its own (":memory:"), the FTS5 table whose vocabulary gives a text's
    terms as the tree index's tokenizer cuts them (store/treeindex_pg.py: PostgreSQL's postings)."""
    conn.execute(f"CREATE VIRTUAL TABLE cut USING fts5(body, tokenize = '{LEXICAL_TOKENIZER}')")
    conn.execute("CREATE VIRTUAL TABLE cut_terms USING fts5vocab(cut, instance)")


def cut_blocks(texts: Sequence[str], rids: Sequence[int]) -> tuple[list[tuple[str, str, int]], list[int]]:
    """The block rows of texts whose row ids are `rids`, cut by FTS5 (`bm25_pg.count_terms`' terms):
    ([(term, COPY line without its key column, rows holding the term)] in term then block order, each
    text's length in tokens). No connection is used: a thread prepares the next batch while one is
    written.

    FTS5 gives each term's token instances in (row, offset) order, so one `GROUP BY term` (which its
    vocabulary table streams, unsorted) yields every instance; the runs of one row in them are its
    term counts, found with numpy. (`GROUP BY term, doc` made SQLite sort every instance: 5,000
    entries of E9, 584k instances, 0.8 s against 0.5 s this way, benchmarks/RESULTS.md.) No posting
    becomes a Python object; the arrays of a block are in row id order."""
    import numpy as np

    conn = sqlite3.connect(":memory:")
    try:
        create_tokenizer(conn)
        conn.executemany("INSERT INTO cut(rowid, body) VALUES (?, ?)", enumerate(texts))
        grouped = conn.execute("SELECT term, COUNT(*), group_concat(doc) FROM cut_terms GROUP BY term").fetchall()
    finally:
        conn.close()
    if not grouped:
        return [], [0] * len(texts)
    terms = [g[0] for g in grouped]
    per_term = np.fromiter((g[1] for g in grouped), dtype=np.int64, count=len(grouped))
    docs = np.array(",".join([g[2] for g in grouped]).split(","), dtype=np.int64)  # every instance's row
    term_of = np.repeat(np.arange(len(terms), dtype=np.int64), per_term)
    lengths = np.bincount(docs, minlength=len(texts))
    starts = np.flatnonzero(_changes(term_of, docs))  # a posting: a run of one (term, row)
    tfs = np.diff(np.append(starts, len(docs)))
    p_term, p_doc = term_of[starts], docs[starts]
    rid_of = np.asarray(rids, dtype=np.int64)
    p_rid = rid_of[p_doc]
    if not bool(np.all(rid_of[1:] > rid_of[:-1])):
        order = np.lexsort((p_rid, p_term))  # rows not numbered in order: a term's rows sorted by id
        p_term, p_doc, p_rid, tfs = p_term[order], p_doc[order], p_rid[order], tfs[order]
    bounds = np.append(np.flatnonzero(_changes(p_term, p_rid >> BLOCK_BITS)), len(p_term)).tolist()
    rid_s, tf_s = list(map(str, p_rid.tolist())), list(map(str, tfs.tolist()))
    len_s = list(map(str, lengths[p_doc].tolist()))
    term_at = p_term.tolist()
    escape = any(c in t for t in terms for c in "\\\t\n\r")  # FTS5 splits at these: never, in practice
    lines = []
    for a, b in pairwise(bounds):  # a block's seg: its smallest row id, the first
        term = terms[term_at[a]]
        line = block_line(copy_text(term) if escape else term, rid_s[a], rid_s[a:b], tf_s[a:b], len_s[a:b])
        lines.append((term, line, b - a))
    return lines, lengths.tolist()


def _changes(major: np.ndarray, minor: np.ndarray) -> np.ndarray:
    """Where a run of equal (major, minor) pairs starts."""
    import numpy as np

    out = np.empty(len(major), dtype=bool)
    if len(out):
        out[0] = True
        np.not_equal(major[1:], major[:-1], out=out[1:])
        out[1:] |= minor[1:] != minor[:-1]
    return out
