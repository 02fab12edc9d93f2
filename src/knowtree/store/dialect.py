"""What differs between the two SQL dialects a store speaks ("sqlite", "postgresql"), for modules
that run SQL on a store's connection: the error classes to catch by kind, and how a store target
(a file path or a URL) names its dialect.

Catch `dialect.IntegrityError` / `OperationalError` / `DatabaseError` (tuples holding sqlite3's class
and, when psycopg is installed, psycopg's) instead of `sqlite3.*`, so the same code works on both
backends. A module that must write different SQL per dialect branches on `store.dialect` (or on
`dialect_of(connection)` for a connection it was handed) and stays inside `store/`.
"""

from __future__ import annotations

import sqlite3
from typing import Literal

Dialect = Literal["sqlite", "postgresql"]
SQLITE: Dialect = "sqlite"
POSTGRESQL: Dialect = "postgresql"
DIALECTS = (SQLITE, POSTGRESQL)
URL_SCHEMES = ("postgresql://", "postgres://")


def _psycopg_errors() -> tuple[tuple[type[BaseException], ...], ...]:
    try:
        import psycopg
    except ImportError:  # the postgres extra is not installed: only SQLite's errors can happen
        return (), (), ()
    return (psycopg.IntegrityError,), (psycopg.OperationalError,), (psycopg.DatabaseError,)


_PG_INTEGRITY, _PG_OPERATIONAL, _PG_DATABASE = _psycopg_errors()
#: a constraint was violated (a duplicate key, a missing referenced row)
IntegrityError: tuple[type[BaseException], ...] = (sqlite3.IntegrityError, *_PG_INTEGRITY)
#: the database could not do it (locked, gone, a connection lost, no such table)
OperationalError: tuple[type[BaseException], ...] = (sqlite3.OperationalError, *_PG_OPERATIONAL)
#: any error raised by the database (the two above included)
DatabaseError: tuple[type[BaseException], ...] = (sqlite3.Error, *_PG_DATABASE)


def is_url(target: object) -> bool:
    """Whether a store target (`--db`, `KNOWTREE_DB`) is a PostgreSQL URL rather than a SQLite file."""
    return isinstance(target, str) and target.lower().startswith(URL_SCHEMES)


def dialect_of(conn: object) -> Dialect:
    """The dialect of a connection handed to `read`/`write`/`transaction` (PostgreSQL's handle says
    so; a sqlite3 connection does not)."""
    return POSTGRESQL if getattr(conn, "dialect", SQLITE) == POSTGRESQL else SQLITE


__all__ = [
    "DIALECTS",
    "POSTGRESQL",
    "SQLITE",
    "DatabaseError",
    "Dialect",
    "IntegrityError",
    "OperationalError",
    "dialect_of",
    "is_url",
]
