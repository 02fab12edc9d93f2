"""Storage: SQLite by default (schema migrations, content-hash ids, FTS5)."""

from knowtree.store.protocol import SQLStore, Store
from knowtree.store.sqlite import SQLiteStore

__all__ = ["SQLStore", "SQLiteStore", "Store"]
