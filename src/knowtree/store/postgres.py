"""A store in a PostgreSQL database (`--db postgresql://…`), for many processes writing at once.

The methods are `store/sqlbase.py`'s, shared with SQLite; this module adds a pool of psycopg
connections (each `write`/`transaction` one transaction on one pooled connection, each `read` one
connection; work nested inside a transaction of this thread reuses its connection), the schema
(`migrations.migrate_postgres`, under an advisory lock), writers of one tree serialized by
`pg_advisory_xact_lock`, and `search_nodes` over a `tsvector` column (GIN index).

Needs the `postgres` extra: `pip install 'knowtree[postgres]'`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from knowtree.errors import StoreError
from knowtree.store.dialect import POSTGRESQL, Dialect
from knowtree.store.guard import CheckReport
from knowtree.store.migrations import MIGRATIONS
from knowtree.store.migrations_pg import migrate_postgres
from knowtree.store.sqlbase import SQLStoreBase, search_terms

INSTALL_HINT = "pip install 'knowtree[postgres]'"


def redact(url: str) -> str:
    """`url` without its password, for messages and `store.path`."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))


def _modules() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise StoreError(f"a postgresql:// database needs psycopg and psycopg_pool: {INSTALL_HINT}") from exc
    return psycopg, psycopg_pool


class PostgresStore(SQLStoreBase):
    """A knowtree database in PostgreSQL; thread-safe (a connection pool)."""

    dialect: Dialect = POSTGRESQL
    stored_order = "seq"

    def __init__(self, url: str, *, busy_timeout: float = 120.0, pool_size: int = 8) -> None:
        super().__init__()
        psycopg, psycopg_pool = _modules()
        from knowtree.store.pgconn import configure

        self.url = url
        self.path = redact(url)
        self.busy_timeout = busy_timeout
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(busy_timeout))) as conn:
                migrate_postgres(conn)
        except psycopg.Error as exc:
            raise StoreError(f"{self.path}: cannot open the database ({_one_line(exc)})") from exc
        self._pool = psycopg_pool.ConnectionPool(
            url, min_size=1, max_size=max(1, pool_size), configure=configure, timeout=busy_timeout, open=True
        )
        self._local = threading.local()

    def close(self) -> None:
        self._pool.close()

    def __del__(self) -> None:  # a store dropped without close() leaves no pool thread behind
        pool = getattr(self, "_pool", None)
        if pool is not None and not pool.closed:
            pool.close(timeout=0)

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """This thread's connection in a transaction: the one already open (nested work joins it, in a
        savepoint), or one from the pool for the time of the block."""
        from knowtree.store.pgconn import Connection

        current = self._current()
        if current is not None:
            with current.raw.transaction():
                yield current
            return
        with self._pooled() as raw:
            handle = Connection(raw)
            self._local.conn = handle
            try:
                with raw.transaction():
                    yield handle
            finally:
                self._local.conn = None

    def _current(self) -> Any:
        """This thread's connection while it is inside a transaction of this store, else None."""
        return getattr(self._local, "conn", None)

    @contextmanager
    def _pooled(self) -> Iterator[Any]:
        """A psycopg connection from the pool for the time of the block, not in a transaction."""
        try:
            pooled = self._pool.connection()
            raw = pooled.__enter__()
        except Exception as exc:  # PoolTimeout, or the server gone
            raise StoreError(f"{self.path}: no database connection ({_one_line(exc)})") from exc
        try:
            yield raw
        except BaseException as exc:
            if not pooled.__exit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            pooled.__exit__(None, None, None)

    def _query(self, sql: str, args: Sequence[object] = ()) -> list[tuple]:
        """One statement: outside a transaction of this thread it runs in autocommit, one round trip
        (a transaction around it added BEGIN and COMMIT: two more, on every model call's cache
        lookup); inside one, in it."""
        if self._current() is not None:
            return super()._query(sql, args)
        from knowtree.store.pgconn import Connection

        with self._pooled() as raw:
            raw.autocommit = True
            try:
                return Connection(raw).execute(sql, args).fetchall()
            finally:
                if not raw.closed:
                    raw.autocommit = False

    @contextmanager
    def _derived_tx(self) -> Iterator[Any]:
        """A cache or ledger write (`_derived_write`'s) outside a transaction of this thread: BEGIN,
        the settings, the statements and COMMIT sent in one pipeline, one round trip instead of
        four (each model call writes one, `put_reply`'s two rows: on a machine shared by many workers' threads
        the round trips, not the model, were most of a call's own time)."""
        if self._current() is not None:
            with super()._derived_tx() as c:
                yield c
            return
        from knowtree.store.pgconn import Connection

        with self._pooled() as raw, raw.pipeline(), raw.transaction():
            handle = Connection(raw)
            self._derived_write(handle)
            yield handle

    def _tx(self) -> Any:
        return self._connection()

    def _reading(self) -> Any:
        return self._connection()

    def _derived_write(self, c: Any) -> None:
        """A cache or ledger row commits without waiting for its WAL flush (`synchronous_commit =
        off` for this transaction only): a server crash may lose the last fraction of a second of
        them, which costs a repeated model call, never a wrong tree or a lost user row (trees,
        messages, jobs keep the synchronous commit). Each model call writes two such rows; waiting for
        two fsyncs per call capped a worker's call rate (docs/scale.md, "Where the bottleneck moves")."""
        c.execute("SET LOCAL synchronous_commit = off")

    def _lock_tree(self, c: Any, name: str) -> None:
        """Writers of one tree (a save, a memory's step, a delete) one after another: a transaction
        lock, released at its commit or rollback."""
        c.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (f"knowtree tree {name}",))

    @contextmanager
    def hold_tree(self, name: str) -> Iterator[object]:
        """Across transactions: one process at a time works on the tree `name` (a memory's add reads
        its state, then writes steps: a second adder waits instead of writing over the first's). A
        session advisory lock on a pooled connection of its own, in autocommit (no transaction left
        open while the lock is held); re-entrant within a thread."""
        held: set[str] = self._local.__dict__.setdefault("held", set())
        if name in held:
            yield None
            return
        key = f"knowtree writer {name}"  # not `_lock_tree`'s key: a step's own lock must not wait on this one
        with self._pool.connection() as raw:
            raw.autocommit = True
            raw.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
            held.add(name)
            try:
                yield None
            finally:
                held.discard(name)
                raw.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
                raw.autocommit = False

    def search_nodes(self, name: str, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """Full-text search over node text and metadata (any of the query's words, ranked by
        `ts_rank`). Returns (node id, score), best first."""
        terms = search_terms(query)
        if not terms:
            return []
        rows = self._query(
            "SELECT id, ts_rank(tsv, q) AS score FROM nodes_fts, to_tsquery('simple', ?) AS q"
            " WHERE tree = ? AND tsv @@ q ORDER BY score DESC, id LIMIT ?",
            (" | ".join(t.lower() for t in terms), name, limit),
        )
        return [(r[0], float(r[1])) for r in rows]


def check(url: str) -> CheckReport:
    """`knowtree check` of a PostgreSQL database, read-only: it answers, holds a knowtree schema this
    version can open, and how many trees and 8 KiB pages it has (PostgreSQL checks its own pages)."""
    psycopg, _ = _modules()
    report = CheckReport(redact(url), [])
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=30) as conn:
            if conn.execute("SELECT to_regclass('schema_version')").fetchone()[0] is None:
                report.problems.append("not a knowtree database (no schema_version table): open it once to create one")
                return report
            version = conn.execute("SELECT version FROM schema_version").fetchone()
            if version is None or version[0] > len(MIGRATIONS):
                report.problems.append(f"schema version {version and version[0]} is not one this knowtree knows")
            report.trees = conn.execute("SELECT COUNT(*) FROM trees").fetchone()[0]
            report.pages = conn.execute("SELECT pg_database_size(current_database()) / 8192").fetchone()[0]
    except psycopg.Error as exc:
        report.problems.append(f"cannot read the database ({_one_line(exc)})")
    return report


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
