"""The tree index's SQL for a store's dialect: `tables(store_or_connection)` is the module whose
functions `retrieve.treeindex` calls (`treeindex_sqlite`: FTS5; `treeindex_pg`: postings and BM25
in SQL, pgvector). Both modules offer the same functions with the same meaning."""

from __future__ import annotations

from types import ModuleType

from knowtree.store.dialect import POSTGRESQL, dialect_of


def tables(handle: object) -> ModuleType:
    """The tree index's SQL module for a store or a connection it handed over."""
    if dialect_of(handle) == POSTGRESQL:
        from knowtree.store import treeindex_pg

        return treeindex_pg
    from knowtree.store import treeindex_sqlite

    return treeindex_sqlite
