"""The store's SQL dialects ("sqlite", "postgresql", a store's `dialect`) and the errors to catch:
modules that run SQL on a store's connection catch `IntegrityError` / `OperationalError` /
`DatabaseError` from here instead of `sqlite3.*` (SQL written once for both: store/portable.py)."""

from __future__ import annotations

import sqlite3

DIALECTS = ("sqlite", "postgresql")


def _errors(name: str) -> tuple[type[Exception], ...]:
    found: list[type[Exception]] = [getattr(sqlite3, name)]
    try:
        import psycopg
    except ImportError:  # PostgreSQL support not installed: SQLite's errors only
        return tuple(found)
    found.append(getattr(psycopg, name))
    return tuple(found)


#: a constraint was violated (a duplicate key, a missing parent row)
IntegrityError: tuple[type[Exception], ...] = _errors("IntegrityError")
#: the database could not run a statement (locked, busy, a lost connection)
OperationalError: tuple[type[Exception], ...] = _errors("OperationalError")
#: any error the database raised
DatabaseError: tuple[type[Exception], ...] = _errors("DatabaseError")


__all__ = [
    "DIALECTS",
    "DatabaseError",
    "IntegrityError",
    "OperationalError",
]
