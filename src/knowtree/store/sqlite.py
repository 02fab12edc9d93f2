"""The default store: one SQLite file holding many named trees, the LLM cache and the call ledger.

The methods live in `store/sqlbase.py` (SQL shared with PostgreSQL); this module adds the file's
connection (one connection, one lock, `BEGIN IMMEDIATE` write transactions) and FTS5's search.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from knowtree.errors import StoreError
from knowtree.store.dialect import SQLITE, Dialect
from knowtree.store.guard import as_sqlite_error, hold, mark, preflight, release
from knowtree.store.migrations import migrate
from knowtree.store.runs import busy_error
from knowtree.store.sqlbase import SQLStoreBase, search_terms

T = TypeVar("T")
#: a hook run inside a tree's delete transaction: fn(connection, tree name)
TreeHook = Callable[[sqlite3.Connection, str], object]
__all__ = ["SQLiteStore", "TreeHook"]


def _create(path: str, busy_timeout: float) -> None:
    """Make the database at `path` when there is none: migrated and stamped in a file of its own
    beside it, then hard-linked into place (never over a file that appeared meanwhile: the process
    that linked first made it, and this one opens that). `sqlite3.connect` on the path itself left an
    empty file there until its first write, and a second process opening the path in that moment (a
    build's Ray workers, two commands started together) refused it as "empty file, not a knowtree
    database". Where the file system has no hard links the path is opened directly, as before."""
    if os.path.exists(path):
        return
    staged = f"{path}.{os.getpid()}-{uuid.uuid4().hex[:8]}.new"
    try:
        conn = sqlite3.connect(staged, isolation_level=None, timeout=busy_timeout)
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot open the database ({exc})") from exc
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        migrate(conn)
        mark(conn)
        conn.close()  # the last connection: its WAL is checkpointed into the file and removed
        try:
            os.link(staged, path)
        except FileExistsError:
            pass  # another process made it first
        except OSError:
            pass  # no hard links here: sqlite3.connect makes the file at its path
    finally:
        conn.close()
        for leftover in (staged, f"{staged}-wal", f"{staged}-shm"):
            if os.path.exists(leftover):
                os.unlink(leftover)


class SQLiteStore(SQLStoreBase):
    """Thread-safe (one connection, one lock); every write is its own transaction."""

    dialect: Dialect = SQLITE

    def __init__(self, path: str | Path, *, busy_timeout: float = 120.0) -> None:
        super().__init__()
        self.path = str(path)
        # an empty, foreign or damaged file is refused before anything touches it; a new one appears
        # at its path complete (another process opening the same new path never sees it empty)
        if preflight(self.path) and self.path != ":memory:" and not self.path.startswith("file:"):
            _create(self.path, busy_timeout)
        try:
            self._conn = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=busy_timeout
            )
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open the database ({exc})") from exc
        self.busy_timeout = busy_timeout
        try:
            self._conn.execute("PRAGMA foreign_keys = ON")
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            migrate(self._conn)
            mark(self._conn)
        except sqlite3.OperationalError as exc:
            self._conn.close()
            raise busy_error(self.path, exc, busy_timeout) from exc
        except (sqlite3.DatabaseError, UnicodeDecodeError) as raised:
            exc = as_sqlite_error(raised)
            if exc is None:
                raise
            self._conn.close()
            raise StoreError(f"{self.path}: not a usable knowtree database ({exc})") from raised
        except StoreError:
            self._conn.close()
            raise
        self._held = hold(self.path)  # so a second store on this file does not read it raw (guard.held)
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            release(self._held)
            self._held = None

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:  # still locked after the busy timeout
                raise busy_error(self.path, exc, self.busy_timeout) from exc
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE … COMMIT, rolled back on error)."""
        with self._tx() as c:
            yield c

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn(connection)` under the store's lock, for reads."""
        with self._lock:
            return fn(self._conn)

    def search_nodes(self, name: str, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """BM25 over node text and metadata (FTS5). Returns (node id, score), best first."""
        terms = search_terms(query)
        if not terms:
            return []
        match = " OR ".join(f'"{t}"' for t in terms)
        rows = self._query(
            "SELECT id, bm25(nodes_fts) FROM nodes_fts WHERE nodes_fts MATCH ? AND tree = ?"
            " ORDER BY bm25(nodes_fts) LIMIT ?",
            (match, name, limit),
        )
        return [(r[0], -float(r[1])) for r in rows]

