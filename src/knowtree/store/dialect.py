"""What differs between the two SQL dialects a store speaks ("sqlite", "postgresql"), for modules
that run SQL on a store's connection: the error classes to catch by kind, and how a store target
(a file path or a URL) names its dialect.

Catch `dialect.IntegrityError` / `OperationalError` / `DatabaseError` (tuples holding sqlite3's class
and, once psycopg is loaded, psycopg's) instead of `sqlite3.*`, so the same code works on both
backends; read them as `dialect.X` where the `except` runs (they are computed then: importing this
module imports no psycopg). A module that must write different SQL per dialect branches on
`store.dialect` (or on `dialect_of(connection)` for a connection it was handed) and stays inside
`store/`.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import TYPE_CHECKING, Literal

Dialect = Literal["sqlite", "postgresql"]
SQLITE: Dialect = "sqlite"
POSTGRESQL: Dialect = "postgresql"
DIALECTS = (SQLITE, POSTGRESQL)
URL_SCHEMES = ("postgresql://", "postgres://")

#: the three tuples by name: sqlite3's class, then psycopg's
_NAMES = {"IntegrityError": 0, "OperationalError": 1, "DatabaseError": 2}
_SQLITE: tuple[type[BaseException], ...] = (sqlite3.IntegrityError, sqlite3.OperationalError, sqlite3.Error)
_PSYCOPG = ("IntegrityError", "OperationalError", "DatabaseError")

if TYPE_CHECKING:
    #: a constraint was violated (a duplicate key, a missing referenced row)
    IntegrityError: tuple[type[BaseException], ...]
    #: the database could not do it (locked, gone, a connection lost, no such table)
    OperationalError: tuple[type[BaseException], ...]
    #: any error raised by the database (the two above included)
    DatabaseError: tuple[type[BaseException], ...]


def __getattr__(name: str) -> tuple[type[BaseException], ...]:
    """`IntegrityError`, `OperationalError`, `DatabaseError`, read when an `except` names them (so
    `except dialect.DatabaseError:`, not a name imported from here). psycopg is not imported for
    them: while it is not loaded, no psycopg error can have been raised and the tuple is sqlite3's
    class alone (a question on a SQLite file does not pay psycopg's import, ~80 ms); once it is
    loaded (a PostgreSQL store imports it), the tuple holds its class too."""
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    ours = _SQLITE[_NAMES[name]]
    psycopg = sys.modules.get("psycopg")
    if psycopg is None:
        return (ours,)
    return (ours, getattr(psycopg, _PSYCOPG[_NAMES[name]]))


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
