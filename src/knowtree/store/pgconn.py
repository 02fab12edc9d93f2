"""The handle a `PostgresStore` gives to `read(fn)`, `write(fn)` and `transaction()`: the subset of
`sqlite3.Connection` the rest of knowtree uses, on one psycopg connection.

- `execute(sql, args=())` returns a cursor with `fetchone`, `fetchall`, iteration, `rowcount`,
  `lastrowid` (None: use `RETURNING`); `executemany(sql, rows)`.
- SQL is written with SQLite's qmark `?` placeholders; `qmark_to_format` turns them into psycopg's
  `%s` (a `?` inside a quoted string, identifier or comment is left alone) and doubles every literal
  `%` (psycopg reads `%` as the start of a placeholder wherever it appears).
- `dialect` is "postgresql" (a sqlite3 connection has none: see `store/dialect.py`).

Values are adapted as SQLite would store them: `True`/`False` become 1/0 (the schema has no boolean
columns), and a `numeric` result (PostgreSQL's SUM of a BIGINT) comes back as an int when whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any

import psycopg
from psycopg.adapt import Dumper, Loader

from knowtree.store.dialect import POSTGRESQL


@lru_cache(maxsize=2048)
def qmark_to_format(sql: str) -> str:
    """`sql` with each `?` placeholder as `%s` and each literal `%` as `%%`; quoted strings ('…',
    with '' inside), quoted identifiers ("…"), dollar-quoted bodies and comments keep their `?`."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":
            end = i + 1
            while end < n:
                if sql[end] == ch:
                    if end + 1 < n and sql[end + 1] == ch:  # a doubled quote inside the literal
                        end += 2
                        continue
                    break
                end += 1
            out.append(sql[i : end + 1].replace("%", "%%"))
            i = end + 1
        elif ch == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif ch == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif ch == "$" and (tag := _dollar_tag(sql, i)):
            end = sql.find(tag, i + len(tag))
            end = n if end < 0 else end + len(tag)
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        else:
            out.append("%s" if ch == "?" else "%%" if ch == "%" else ch)
            i += 1
    return "".join(out)


def _dollar_tag(sql: str, i: int) -> str:
    """The `$tag$` opening a dollar-quoted string at `i` ('' when there is none: `$1` is no tag)."""
    end = sql.find("$", i + 1)
    if end < 0:
        return ""
    tag = sql[i + 1 : end]
    if tag and not (tag.replace("_", "a").isalnum() and not tag[0].isdigit()):
        return ""
    return sql[i : end + 1]


class _BoolAsInt(Dumper):
    """True/False as the integers 1/0, as sqlite3 binds them."""

    oid = psycopg.postgres.types["int4"].oid

    def dump(self, obj: Any) -> bytes:
        return b"1" if obj else b"0"


class _WholeNumeric(Loader):
    """`numeric` results (SUM over BIGINT) as int when whole, else float, as SQLite returns them."""

    def load(self, data: Any) -> int | float:
        value = Decimal(bytes(data).decode())
        return int(value) if value == value.to_integral_value() else float(value)


def configure(conn: psycopg.Connection) -> None:
    """Adapt values of a new pooled connection the way sqlite3 would."""
    conn.adapters.register_dumper(bool, _BoolAsInt)
    conn.adapters.register_loader("numeric", _WholeNumeric)


class Cursor:
    """A psycopg cursor after one statement, read like a sqlite3 cursor."""

    lastrowid = None  # PostgreSQL has no rowid to report: write `INSERT … RETURNING id` instead

    def __init__(self, cur: psycopg.Cursor) -> None:
        self._cur = cur

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount

    @property
    def description(self) -> Any:
        return self._cur.description

    # a statement that returns no rows reads as none, as sqlite3's does (psycopg raises). Asked, not
    # checked beforehand: in a pipeline a statement's description is only known once its result is
    # fetched (the fetch sends the pipeline's sync)
    def _rows(self, fetch: Any, none: Any) -> Any:
        try:
            return fetch()
        except psycopg.ProgrammingError:
            return none

    def fetchone(self) -> tuple | None:
        return self._rows(self._cur.fetchone, None)

    def fetchall(self) -> list[tuple]:
        return self._rows(self._cur.fetchall, [])

    def fetchmany(self, size: int = 1) -> list[tuple]:
        return self._rows(lambda: self._cur.fetchmany(size), [])

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.fetchall())


class Connection:
    """One pooled psycopg connection inside a transaction, used like a sqlite3 connection."""

    dialect = POSTGRESQL

    def __init__(self, conn: psycopg.Connection) -> None:
        self.raw = conn

    def execute(self, sql: str, args: Sequence[object] = ()) -> Cursor:
        cur = self.raw.cursor()
        cur.execute(qmark_to_format(sql), list(args))  # type: ignore[arg-type]  # built at run time
        return Cursor(cur)

    def copy_rows(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        """Insert rows with COPY (bulk writes: several times faster than INSERTs). `table` and
        `columns` are the caller's own names, never user input."""
        sql = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
        with self.raw.cursor() as cur, cur.copy(sql) as copy:  # type: ignore[arg-type]
            for row in rows:
                copy.write_row(row)

    def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> Cursor:
        cur = self.raw.cursor()
        batch = [list(r) for r in rows]
        if batch:
            cur.executemany(qmark_to_format(sql), batch)  # type: ignore[arg-type]
        return Cursor(cur)


__all__ = ["Connection", "Cursor", "configure", "qmark_to_format"]
