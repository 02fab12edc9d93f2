"""The tree index's writes and lexical search that differ by dialect (retrieve/treeindex.py calls
these on the connection it is handed). SQLite keeps a full-text twin of `tree_index` (FTS5, external
content, rowid = `rid`); PostgreSQL has no twin yet: its lexical search here ranks the entries with
`ts_rank` over `to_tsvector('english', body)` — a stand-in until the tree index's own PostgreSQL
search (the scaleidx branch) replaces this module's PostgreSQL half.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowtree.store.dialect import SQLITE, dialect_of

PUT_VECTORS = (
    "INSERT INTO tree_index_vec(tree, id, embedder, hash, vec) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (tree, embedder, id) DO UPDATE SET hash = excluded.hash, vec = excluded.vec"
)
PUT_STATE = (
    "INSERT INTO tree_index_state(tree, signature, entries, updated, content) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (tree) DO UPDATE SET signature = excluded.signature, entries = excluded.entries,"
    " updated = excluded.updated, content = excluded.content"
)
_SQLITE_LEXICAL = (
    "SELECT id, bm25(tree_index_fts) FROM tree_index_fts WHERE tree_index_fts MATCH ? AND tree = ?"
    " ORDER BY bm25(tree_index_fts) LIMIT ?"
)
_PG_LEXICAL = (
    "SELECT id, -ts_rank(to_tsvector('english', body), q) AS s FROM tree_index,"
    " to_tsquery('english', ?) AS q WHERE tree = ? AND to_tsvector('english', body) @@ q ORDER BY s, rid LIMIT ?"
)


def index_new_rows(conn: Any, after: int) -> None:
    """Full-text rows for the entries written after rid `after` (SQLite; nothing on PostgreSQL)."""
    if dialect_of(conn) == SQLITE:
        conn.execute(
            "INSERT INTO tree_index_fts(rowid, tree, id, body) SELECT rid, tree, id, body FROM tree_index"
            " WHERE rid > ?",
            (after,),
        )


def delete_rows(conn: Any, rids: Sequence[int], marks: str) -> None:
    """Delete entries by rid (`marks`: their `?,?,…`), their full-text rows first (SQLite's external
    content: a row is deleted with the text it indexed)."""
    if dialect_of(conn) == SQLITE:
        conn.execute(
            "INSERT INTO tree_index_fts(tree_index_fts, rowid, tree, id, body)"
            f" SELECT 'delete', rid, tree, id, body FROM tree_index WHERE rid IN ({marks})",
            rids,
        )
    conn.execute(f"DELETE FROM tree_index WHERE rid IN ({marks})", rids)


def drop_fts(conn: Any, tree: str) -> None:
    """Delete a tree's full-text rows (SQLite; nothing on PostgreSQL)."""
    if dialect_of(conn) == SQLITE:
        conn.execute(
            "INSERT INTO tree_index_fts(tree_index_fts, rowid, tree, id, body)"
            " SELECT 'delete', rid, tree, id, body FROM tree_index WHERE tree = ?",
            (tree,),
        )


def lexical_query(dialect: str, terms: Sequence[str], match: str) -> tuple[str, str]:
    """(SQL, its match argument) of the lexical search: FTS5's bm25 with `match` on SQLite; on
    PostgreSQL any of the terms' words, ranked by `ts_rank` (negated: lower is better, as bm25)."""
    if dialect == SQLITE:
        return _SQLITE_LEXICAL, match
    words = ("".join(ch for ch in t if ch.isalnum()) for t in terms)
    return _PG_LEXICAL, " | ".join(w for w in words if w)
