"""`knowtree db copy SRC DST`: every table of one store into another (SQLite or PostgreSQL, either
way), verified.

- Tables in the order their rows may refer to each other (store/tables.py: trees, tenants and
  knowledge bases first), derived tables left out: the destination rebuilds its full-text rows.
- Rows read in batches by keyset pagination (`WHERE key > last ORDER BY key LIMIT n`), so memory
  stays flat whatever the size, and written with `ON CONFLICT DO NOTHING`: a copy that was stopped
  is resumed by running it again.
- Nothing stored in the destination is replaced: a destination row under a copied row's key that
  holds something else stops the copy with `CopyConflictError` naming the table and the key
  (the batches written before it only added rows).
- Then each table is verified: row counts and a content hash (sha256 over the rows in key order,
  values normalised across dialects: store/tables.py) equal on both sides, for the rows of the
  source's keys (a destination may hold more rows of its own).
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from knowtree.errors import StoreError
from knowtree.store.portable import dialect_of, insert_new
from knowtree.store.tables import Table, encode_row, list_tables, normal_row, text_key_collation

BATCH = 1000


class CopyConflictError(StoreError):
    """The destination holds different data under a key the source copies."""


@dataclass
class TableReport:
    """One table's copy: rows in the source, rows written now, and the verification."""

    name: str
    source_rows: int = 0
    written: int = 0
    dest_rows: int = 0
    source_hash: str = ""
    dest_hash: str = ""

    @property
    def ok(self) -> bool:
        return self.source_rows == self.dest_rows and self.source_hash == self.dest_hash


@dataclass
class CopyReport:
    tables: list[TableReport] = field(default_factory=list)
    complete: bool = True  # False when stopped after `max_batches`
    #: tables not copied: the flat passage indexes, unless both stores are SQLite files
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.complete and all(t.ok for t in self.tables)

    @property
    def rows(self) -> int:
        return sum(t.source_rows for t in self.tables)


def copy_store(
    src: Any,
    dst: Any,
    *,
    batch: int = BATCH,
    max_batches: int | None = None,
    progress: Callable[[str, int], object] | None = None,
) -> CopyReport:
    """Copy every user-data table of `src` into `dst` (both `SQLStore`s), then verify it.
    `max_batches` stops after that many batches (unverified, `complete=False`): how a test stops a
    copy midway; `progress(table, rows written so far)` after each batch."""
    if _same_database(src, dst):
        raise StoreError(f"{src.path}: the source and the destination are the same database: nothing to copy")
    if dialect_of(src) == dialect_of(dst) == "sqlite":  # an index's table exists once opened: make the source's
        dst.write(lambda c: _create_flat_tables(c, [t.name for t in list_tables(src) if t.flat]))
    dest_tables = {t.name: t for t in list_tables(dst)}
    report = CopyReport()
    budget = [max_batches]
    plan = []
    tables = list_tables(src)
    flat = dialect_of(src) == dialect_of(dst) == "sqlite"  # flat indexes are SQLite files' tables
    for table in tables:
        target = dest_tables.get(table.name)
        if table.flat and not flat:
            report.skipped.append(table.name)
            continue
        if target is None:
            raise StoreError(
                f"the destination has no table {table.name!r}: is it a knowtree database of this version?"
            )
        columns = tuple(c for c in table.columns if c in target.columns)
        plan.append(Table(table.name, columns, table.key, table.rowid, table.by_content, table.fts))
    for table in plan:
        tr = TableReport(table.name)
        report.tables.append(tr)
        held = _contents(dst, table, batch) if table.by_content else None
        for rows in _stored_batches(src, table, batch):
            if budget[0] is not None:
                if budget[0] <= 0:
                    report.complete = False
                    return report
                budget[0] -= 1
            tr.written += (
                _write_new(dst, table, rows, held) if held is not None else _write_batch(dst, table, rows)
            )
            if progress is not None:
                progress(table.name, tr.written)
    _after_copy(dst, plan)
    for tr, table in zip(report.tables, plan, strict=True):
        tr.source_rows, tr.source_hash = table_hash(src, table, batch=batch)
        tr.dest_rows, tr.dest_hash = table_hash(dst, table, keys_of=src, batch=batch)
    return report


def _same_database(src: Any, dst: Any) -> bool:
    a, b = str(getattr(src, "path", "")), str(getattr(dst, "path", ""))
    if dialect_of(src) != dialect_of(dst) or ":memory:" in (a, b):
        return False
    if dialect_of(src) == "postgresql":
        return a == b
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def _create_flat_tables(c: Any, names: Sequence[str]) -> None:
    from knowtree.store.migrations import create_lexical_index, create_vector_index

    for name in names:
        if name.startswith("lex_"):
            create_lexical_index(c, name.removeprefix("lex_"))
        elif name.startswith("vec_"):
            create_vector_index(c, name.removeprefix("vec_"))


def _stored_batches(store: Any, table: Table, size: int) -> Iterator[list[tuple]]:
    """The table's rows in the order they were stored where the database keeps one (SQLite's
    rowids, so the destination stores them in that order too), else in key order."""
    if not (table.rowid and dialect_of(store) == "sqlite"):
        yield from _batches(store, table, size)
        return
    cols = ", ".join(table.columns)
    last = None
    while True:
        where = " WHERE rowid > ?" if last is not None else ""
        rows = store.query(
            f"SELECT rowid, {cols} FROM {table.name}{where} ORDER BY rowid LIMIT {int(size)}",
            () if last is None else (last,),
        )
        if not rows:
            return
        yield [r[1:] for r in rows]
        last = rows[-1][0]
        if len(rows) < size:
            return


def _digest(table: Table, row: Sequence[object]) -> bytes:
    return hashlib.sha256(encode_row(normal_row(table.columns, row))).digest()


def _contents(store: Any, table: Table, batch: int) -> Counter[bytes]:
    """The digests of a BY_CONTENT table's rows (with how many rows have each)."""
    return Counter(_digest(table, row) for rows in _batches(store, table, batch) for row in rows)


def _write_new(dst: Any, table: Table, rows: list[tuple], held: Counter[bytes]) -> int:
    """Write the rows of a BY_CONTENT table that the destination does not hold yet (an equal row
    counts once), numbered by the destination."""
    new = []
    for row in rows:
        d = _digest(table, row)
        if held[d] > 0:
            held[d] -= 1
        else:
            new.append(row)
    if new:
        cols = ", ".join(table.columns)
        marks = ", ".join("?" * len(table.columns))
        dst.write(lambda c: c.executemany(f"INSERT INTO {table.name}({cols}) VALUES ({marks})", new))
    return len(new)


def _content_hash(dst: Any, table: Table, src: Any, batch: int) -> tuple[int, str]:
    """(rows, sha256) of the destination's rows equal to the source's, in the source's order."""
    held = _contents(dst, table, batch)
    h = hashlib.sha256()
    count = 0
    for rows in _batches(src, table, batch):
        for row in rows:
            d = _digest(table, row)
            if held[d] > 0:
                held[d] -= 1
                h.update(encode_row(normal_row(table.columns, row)))
                count += 1
    return count, h.hexdigest()


def _order(store: Any, table: Table) -> tuple[str, str]:
    """(ORDER BY clause, keyset WHERE clause) of a table's key on `store`, text keys in byte order."""
    collate = text_key_collation(store)
    keys = [f"{k}{collate}" for k in table.key]
    after = f"({', '.join(keys)}) > ({', '.join('?' * len(keys))})"
    return ", ".join(keys), after


def _batches(
    store: Any, table: Table, size: int, columns: Sequence[str] | None = None
) -> Iterator[list[tuple]]:
    """The table's rows (its `columns`, the copied ones by default) in key order, `size` at a time."""
    wanted = list(columns or table.columns)
    cols = ", ".join([*table.key, *wanted])
    order, after = _order(store, table)
    nkey = len(table.key)
    last: tuple[object, ...] | None = None
    while True:
        where = f" WHERE {after}" if last is not None else ""
        sql = f"SELECT {cols} FROM {table.name}{where} ORDER BY {order} LIMIT {int(size)}"
        rows = store.query(sql, last or ())
        if not rows:
            return
        yield [tuple(r[nkey:]) for r in rows]
        last = tuple(rows[-1][:nkey])
        if len(rows) < size:
            return


def _existing(c: Any, table: Table, keys: Sequence[tuple[object, ...]]) -> dict[tuple, tuple]:
    """The destination's rows (copied columns) under `keys`, by key."""
    cols = ", ".join(table.columns)
    found: dict[tuple, tuple] = {}
    per = max(1, 500 // len(table.key))
    for i in range(0, len(keys), per):
        part = keys[i : i + per]
        if len(table.key) == 1:
            where = f"{table.key[0]} IN ({', '.join('?' * len(part))})"
            args: list[object] = [k[0] for k in part]
        else:
            one = "(" + ", ".join("?" * len(table.key)) + ")"
            where = f"({', '.join(table.key)}) IN (VALUES {', '.join([one] * len(part))})"
            args = [v for k in part for v in k]
        for row in c.execute(f"SELECT {cols} FROM {table.name} WHERE {where}", args).fetchall():
            found[table.key_of(row)] = row
    return found


def _write_batch(dst: Any, table: Table, rows: list[tuple]) -> int:
    """Write the rows the destination lacks, in one transaction; a key it holds with other values
    raises CopyConflictError. Returns how many rows were written."""
    with dst.transaction() as c:
        keys = [table.key_of(r) for r in rows]
        there = _existing(c, table, keys)
        new = []
        for key, row in zip(keys, rows, strict=True):
            held = there.get(key)
            if held is None:
                new.append(row)
            elif normal_row(table.columns, held) != normal_row(table.columns, row):
                shown = ", ".join(f"{k}={v!r}" for k, v in zip(table.key, key, strict=True))
                raise CopyConflictError(
                    f"the destination already holds different data in table {table.name!r} under"
                    f" {shown}: nothing there is overwritten; copy into an empty database, or remove"
                    " that data from the destination first"
                )
        if new:
            insert = insert_new(table.name, table.columns, table.key)
            if table.fts:  # no key constraint to conflict on (rows were looked up above)
                insert = f"INSERT INTO {table.name}({', '.join(table.columns)}) VALUES ({', '.join('?' * len(table.columns))})"
            c.executemany(insert, new)
    return len(new)


def table_hash(store: Any, table: Table, *, keys_of: Any = None, batch: int = BATCH) -> tuple[int, str]:
    """(rows, sha256 of the rows in key order, values normalised): of every row of the table, or
    only of the rows whose keys `keys_of` (another store) holds too."""
    if keys_of is None:
        h = hashlib.sha256()
        count = 0
        for rows in _batches(store, table, batch):
            for row in rows:
                h.update(encode_row(normal_row(table.columns, row)))
            count += len(rows)
        return count, h.hexdigest()
    if table.by_content:
        return _content_hash(store, table, keys_of, batch)
    return _matched_hash(store, table, keys_of, batch)


def _rows(store: Any, table: Table, batch: int, columns: Sequence[str] | None = None) -> Iterator[tuple]:
    for rows in _batches(store, table, batch, columns):
        yield from rows


def _matched_hash(store: Any, table: Table, keys_of: Any, batch: int) -> tuple[int, str]:
    """`table_hash` of the rows of `store` under the keys `keys_of` holds: both read in key order
    (the same byte order on both dialects) and merged, so each is read once, in batches."""
    h = hashlib.sha256()
    count = 0
    keys = _rows(keys_of, table, batch, columns=table.key)
    wanted = next(keys, None)
    for row in _rows(store, table, batch):
        key = table.key_of(row)
        while wanted is not None and wanted < key:
            wanted = next(keys, None)
        if wanted is None:
            break
        if wanted == key:
            h.update(encode_row(normal_row(table.columns, row)))
            count += 1
    return count, h.hexdigest()


def _after_copy(dst: Any, tables: Sequence[Table]) -> None:
    """What the destination derives from copied rows: its full-text rows (rebuilt for every tree),
    a PostgreSQL sequence behind a copied integer column (moved past the largest copied value)."""
    from knowtree.store.derived import rebuild_search

    if dialect_of(dst) == "postgresql":
        dst.write(lambda c: _advance_sequences(c, tables))
    trees = (
        [r[0] for r in dst.query("SELECT name FROM trees")] if any(t.name == "nodes" for t in tables) else []
    )
    rebuild_search(dst, trees)


def _advance_sequences(c: Any, tables: Sequence[Table]) -> None:
    for table in tables:
        for column in table.columns:
            row = c.execute("SELECT pg_get_serial_sequence(?, ?)", (table.name, column)).fetchone()
            if row and row[0]:
                # the next value: one past the largest copied (1 on an empty table)
                c.execute(
                    f"SELECT setval(?, COALESCE(MAX({column}), 0) + 1, false) FROM {table.name}", (row[0],)
                )


__all__ = ["BATCH", "CopyConflictError", "CopyReport", "TableReport", "copy_store", "table_hash"]
