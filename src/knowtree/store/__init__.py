"""Storage: the store interface and its SQLite and PostgreSQL implementations (every table created by
`migrations.py`, content-hash ids, full-text search), runs, the ledger and cache rows, database
guards; `open_store(target)` opens the one a file path or `postgresql://` URL names.

May import: llm (reply types for the cache), config, text, types, errors — nothing above.
"""

from knowtree.store.opening import open_store
from knowtree.store.postgres import PostgresStore  # psycopg itself is imported on first use
from knowtree.store.protocol import SQLStore, Store
from knowtree.store.sqlite import SQLiteStore

__all__ = ["PostgresStore", "SQLStore", "SQLiteStore", "Store", "open_store"]
