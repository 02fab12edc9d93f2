"""Temporary FTS5 tables that cut text into terms exactly as the tree index's tokenizer does: the
query's words and their entry counts on SQLite (store/treeindex_sqlite.py), a text's terms for
PostgreSQL's postings (store/treeindex_pg.py, cut and grouped into blocks of row ids here:
`cut_blocks`), so BM25 is FTS5's on both backends."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from knowtree.store.migrations import LEXICAL_TOKENIZER
from knowtree.store.migrations_postings import BLOCK_BITS


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


#: a block row as a line of COPY's text format, made by SQLite (the term escaped as `bm25_blocks.copy_text` does)
_LINE = (
    "replace(replace(replace(replace(c.term, '\\', '\\\\'), char(9), '\\t'), char(10), '\\n'), char(13), '\\r')"
    " || char(9) || min(i.rid) || char(9) || '{' || group_concat(i.rid) || '}' || char(9)"
    " || '{' || group_concat(c.n) || '}' || char(9) || '{' || group_concat(l.len) || '}' || char(10)"
)


def cut_blocks(texts: Sequence[str], rids: Sequence[int]) -> tuple[list[tuple[str, str, int]], list[int]]:
    """The block rows of texts whose row ids are `rids`, cut by FTS5 (`bm25_pg.count_terms`' terms) and
    grouped inside SQLite, so no posting becomes a Python object: ([(term, COPY line without its key
    column, rows holding the term)], each text's length in tokens). No connection is used: a thread
    prepares the next batch while one is written. The three arrays of a row are aggregated over the
    same rows in the same order (one GROUP BY), so they stay aligned."""
    conn = sqlite3.connect(":memory:")
    try:
        create_tokenizer(conn)
        conn.executemany("INSERT INTO cut(rowid, body) VALUES (?, ?)", enumerate(texts))
        conn.execute("CREATE TABLE ids(doc INTEGER PRIMARY KEY, rid INTEGER NOT NULL)")
        conn.executemany("INSERT INTO ids VALUES (?, ?)", enumerate(rids))
        conn.execute("CREATE TABLE c AS SELECT term, doc, COUNT(*) AS n FROM cut_terms GROUP BY term, doc")
        conn.execute("CREATE TABLE l AS SELECT doc, SUM(n) AS len FROM c GROUP BY doc")
        lengths = [0] * len(texts)
        for doc, n in conn.execute("SELECT doc, len FROM l"):
            lengths[doc] = n
        lines = conn.execute(
            f"SELECT c.term, {_LINE}, COUNT(*) FROM c JOIN ids i ON i.doc = c.doc JOIN l ON l.doc = c.doc"
            f" GROUP BY c.term, i.rid >> {BLOCK_BITS} ORDER BY c.term, i.rid >> {BLOCK_BITS}"
        ).fetchall()
    finally:
        conn.close()
    return lines, lengths
