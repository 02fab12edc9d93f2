"""SQL written once for both dialects, and the few fragments that must differ (branching on a
store's `dialect`). Used by the modules of store/ that own tables of their own (document infos,
knowledge bases, tenants, runs, the flat indexes, `db copy`).

Written once: qmark `?` placeholders, `INSERT ... ON CONFLICT (...) DO UPDATE / DO NOTHING` (SQLite
>= 3.24 and PostgreSQL) instead of `INSERT OR REPLACE / IGNORE`, `RETURNING` instead of `lastrowid`,
timestamps computed in Python (never `datetime('now')`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any


def dialect_of(store: Any) -> str:
    """The SQL dialect of `store` ("sqlite" when it does not say)."""
    return str(getattr(store, "dialect", "sqlite"))


def now() -> str:
    """A row's timestamp (UTC, to the second), computed here rather than by the database."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def stored_order(store: Any) -> str:
    """The column that orders a table's rows as they were first stored: the store's `stored_order`
    (PostgreSQL's `seq` identity column, given to the tables read in stored order), SQLite's `rowid`."""
    return str(getattr(store, "stored_order", None) or ("rowid" if dialect_of(store) == "sqlite" else "seq"))


def sqlite_version() -> str:
    """The version of the SQLite library Python's sqlite3 runs on (recorded with eval results)."""
    import sqlite3

    return sqlite3.sqlite_version


def _insert(table: str, columns: Sequence[str]) -> str:
    return f"INSERT INTO {table}({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


def upsert(table: str, columns: Sequence[str], keys: Sequence[str]) -> str:
    """Insert a row, or update the row of the same `keys` in place (`INSERT OR REPLACE` deleted it and
    inserted a new one; this keeps its place and fires no delete)."""
    rest = [c for c in columns if c not in keys]
    sets = ", ".join(f"{c} = excluded.{c}" for c in rest)
    action = f"DO UPDATE SET {sets}" if rest else "DO NOTHING"
    return f"{_insert(table, columns)} ON CONFLICT ({', '.join(keys)}) {action}"


def insert_new(table: str, columns: Sequence[str], keys: Sequence[str]) -> str:
    """Insert a row unless one of the same `keys` exists (`INSERT OR IGNORE`, for that key only)."""
    return f"{_insert(table, columns)} ON CONFLICT ({', '.join(keys)}) DO NOTHING"


__all__ = ["dialect_of", "insert_new", "now", "sqlite_version", "stored_order", "upsert"]
