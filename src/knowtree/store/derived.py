"""What a store derives from its rows rather than stores as data — the full-text rows of nodes and
the tree index's (PostgreSQL: its BM25 postings) — rebuilt after `db copy` wrote the rows without them (store/copy.py).

On SQLite the nodes' full-text rows are FTS5 rows keyed by their node row's rowid, the tree index's
an external-content FTS5 table ('rebuild' re-reads it); on PostgreSQL `nodes_fts` rows are keyed by
(tree, id) with a generated tsvector (store/rows.py), a vector's pgvector value is derived from its
bytes, and a store may name more work of its own (`rebuild_search`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from knowtree.store.portable import dialect_of
from knowtree.store.rows import NODE_COLUMNS, delete_tree_fts, fts_body, node_from_row

#: `content = 'TABLE'` in an FTS5 table's definition (an external-content table; `content = ''` is none)
_EXTERNAL_CONTENT = re.compile(r"\bcontent\s*=\s*'[^']+'")


def rebuild_search(store: Any, trees: Sequence[str], batch: int = 2000) -> None:
    """Derive the full-text rows of `trees` afresh from their node rows, then the store's other
    full-text tables (one transaction per tree)."""
    pg = dialect_of(store) == "postgresql"
    for name in trees:
        store.write(lambda c, name=name: _tree_fts(c, name, pg, batch))
    if pg:
        from knowtree.store.treeindex_pg import fill_vectors, rebuild_postings

        indexed = {r[0] for r in store.query("SELECT DISTINCT tree FROM tree_index")}
        for name in trees:
            if name in indexed:  # the tree index's BM25 postings (store/bm25_pg.py)
                store.write(lambda c, name=name: rebuild_postings(c, name, batch))
        vectored = {r[0] for r in store.query("SELECT DISTINCT tree FROM tree_index_vec WHERE emb IS NULL")}
        for name in sorted(vectored):  # pgvector values of vectors copied as bytes
            store.write(lambda c, name=name: fill_vectors(c, name, batch))
        extra = getattr(store, "rebuild_search", None)
        if callable(extra):
            extra()
        return
    store.write(_external_fts)


def _tree_fts(c: Any, name: str, pg: bool, batch: int) -> None:
    delete_tree_fts(c, name)
    key = "0" if pg else "rowid"  # SQLite: a full-text row is keyed by its node row's rowid
    last = ""
    while True:
        rows = c.execute(
            f"SELECT {key}, {NODE_COLUMNS} FROM nodes WHERE tree = ? AND id > ? ORDER BY id LIMIT ?",
            (name, last, batch),
        ).fetchall()
        if not rows:
            return
        if pg:
            c.executemany(
                "INSERT INTO nodes_fts(body, tree, id) VALUES (?, ?, ?)",
                [(fts_body(node_from_row(r[1:])), name, r[1]) for r in rows],
            )
        else:  # the rowid given as a value, in order (store/rows.py: `insert_nodes`)
            c.executemany(
                "INSERT INTO nodes_fts(rowid, tree, id, body) VALUES (?, ?, ?, ?)",
                sorted((r[0], name, r[1], fts_body(node_from_row(r[1:]))) for r in rows),
            )
        last = rows[-1][1]


def _external_fts(c: Any) -> None:
    virtual = c.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%fts5%'"
    ).fetchall()
    for table, sql in virtual:
        if _EXTERNAL_CONTENT.search(sql):
            c.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")


__all__ = ["rebuild_search"]
