"""Storage: SQLite by default (schema migrations, content-hash ids, FTS5)."""

from knowtree.store.sqlite import SQLiteStore

__all__ = ["SQLiteStore"]
