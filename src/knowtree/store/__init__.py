"""Storage: the store interface and its SQLite implementation (every table created by
`migrations.py`, content-hash ids, FTS5), runs, the ledger and cache rows, database guards.

May import: llm (reply types for the cache), config, text, types, errors — nothing above.
"""

from knowtree.store.protocol import SQLStore, Store
from knowtree.store.sqlite import SQLiteStore

__all__ = ["SQLStore", "SQLiteStore", "Store"]
