"""Tables made per named flat index at run time: an index may live in a file of its own, or in
memory, where no migration runs, so these create the registry tables too (store/flatindex.py)."""

from __future__ import annotations

import re
import sqlite3

INDEX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
LEXICAL_TOKENIZER = "porter unicode61 remove_diacritics 2"


def _table(prefix: str, name: str) -> str:
    if not INDEX_NAME.fullmatch(name):  # callers check first, with a message for the user
        raise ValueError(f"index name {name!r}: use letters, digits and '_' (at most 64)")
    return f"{prefix}_{name}"


def create_lexical_index(conn: sqlite3.Connection, name: str) -> str:
    """Create (if missing) the FTS5 table of the lexical index `name`, and `lexical_indexes`;
    returns the table's name."""
    table = _table("lex", name)
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5("
        f"pid UNINDEXED, doc UNINDEXED, body, meta UNINDEXED, tokenize = '{LEXICAL_TOKENIZER}')"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS lexical_indexes(name TEXT PRIMARY KEY, fingerprint TEXT, passages INTEGER)"
    )
    return table


def create_vector_index(conn: sqlite3.Connection, name: str) -> str:
    """Create (if missing) the vector table of the index `name`, and `vector_indexes`; returns the
    table's name."""
    table = _table("vec", name)
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {table}("
        "pid TEXT PRIMARY KEY, doc TEXT NOT NULL, embedder TEXT NOT NULL, vec BLOB NOT NULL)"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS vector_indexes("
        "name TEXT PRIMARY KEY, fingerprint TEXT, embedder TEXT, dim INTEGER, passages INTEGER)"
    )
    return table
