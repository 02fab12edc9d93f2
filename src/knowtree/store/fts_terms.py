"""Temporary FTS5 tables that cut text into terms exactly as the tree index's tokenizer does: the
query's words and their entry counts on SQLite (store/treeindex_sqlite.py), a text's terms for
PostgreSQL's postings (store/treeindex_pg.py), so BM25 is FTS5's on both backends."""

from __future__ import annotations

import sqlite3

from knowtree.store.migrations import LEXICAL_TOKENIZER


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
