"""What a store's tables are, read from the database itself (SQLite's schema, PostgreSQL's
information_schema), and the dialect-neutral form of a row's values: what `db copy` copies and
hashes.

A table's key is what identifies a row across databases: its primary key, except where that is
only a row number standing in for a natural key (an SQLite `INTEGER PRIMARY KEY` alias beside a
`UNIQUE` constraint, as in `tree_index`): then the natural key, and the row number is not copied
(the destination numbers its rows itself). Tables derived from others are not user data and are
never listed: full-text tables and their shadow tables (rebuilt by the destination), the lexical
indexes' FTS5 tables and their registry (re-indexed on next use), the databases' own bookkeeping.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from knowtree.store.portable import dialect_of

#: written first, in this order: the tables other tables' rows refer to (foreign keys)
PARENTS = ("trees", "tenants", "kbs")
#: derived or bookkeeping tables, never copied (re-derived by the destination when it needs them)
DERIVED = frozenset(  # the tree index's BM25 postings on PostgreSQL: rebuilt from its rows (store/derived.py)
    {"sqlite_sequence", "schema_version", "tree_index_terms", "tree_index_postings", "tree_index_df",
     "tree_index_stats"}
)
_DERIVED_PREFIXES = ("sqlite_",)
_DERIVED_SUFFIXES = ("_fts",)  # full-text rows (PostgreSQL keeps them in plain tables)
#: the shadow tables SQLite's FTS5 keeps beside a virtual table
_FTS_SHADOWS = ("_data", "_idx", "_content", "_docsize", "_config")
#: tables whose integer key is the database's own numbering, not the user's (the LLM call ledger's
#: sequence): their rows are matched by content and numbered afresh by the destination
BY_CONTENT = {"llm_calls": "seq"}
#: the flat passage indexes' tables (store/flatindex.py: SQLite files; a knowledge base keeps its
#: indexes in its database): copied between SQLite files, left out where a destination has none
FLAT_PREFIXES = ("lex_", "vec_")
FLAT_REGISTRIES = ("lexical_indexes", "vector_indexes")
#: the columns of a lexical index's FTS5 table (store/migrations.py `create_lexical_index`)
LEXICAL_COLUMNS = ("pid", "doc", "body", "meta")
#: byte-ordered collations: PostgreSQL sorts text like SQLite (by UTF-8 bytes) under these
BYTE_ORDER_COLLATIONS = frozenset({"C", "POSIX", "C.UTF-8", "C.utf8", "ucs_basic"})


@dataclass(frozen=True)
class Table:
    """A table to copy: its name, the columns copied (in source order) and its key columns."""

    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    #: SQLite: the table has rowids, read in their order (the order its rows were stored in)
    rowid: bool = False
    #: the key is the database's numbering (BY_CONTENT): not copied, rows matched by their content
    by_content: bool = False
    #: an FTS5 table (a lexical index): no key constraint, so rows are inserted without ON CONFLICT
    fts: bool = False

    @property
    def flat(self) -> bool:
        """One of the flat passage indexes' tables (FLAT_PREFIXES, FLAT_REGISTRIES)."""
        return self.name.startswith(FLAT_PREFIXES) or self.name in FLAT_REGISTRIES

    def key_of(self, row: Sequence[object]) -> tuple[object, ...]:
        return tuple(row[self.columns.index(k)] for k in self.key)


def list_tables(store: Any) -> list[Table]:
    """The user-data tables of `store` in the order a copy writes them (PARENTS first, then the
    rest in the order the database lists them)."""
    tables = store.read(_pg_tables if dialect_of(store) == "postgresql" else _sqlite_tables)
    first = {name: i for i, name in enumerate(PARENTS)}
    tables = [_numbered(t) if BY_CONTENT.get(t.name) in t.key else t for t in tables]
    return sorted(tables, key=lambda t: first.get(t.name, len(PARENTS)))


def _numbered(t: Table) -> Table:
    return Table(
        t.name, tuple(c for c in t.columns if c not in t.key), t.key, t.rowid, by_content=True, fts=t.fts
    )


def _derived(name: str) -> bool:
    return name in DERIVED or name.startswith(_DERIVED_PREFIXES) or name.endswith(_DERIVED_SUFFIXES)


def _sqlite_tables(c: Any) -> list[Table]:
    rows = c.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY rowid").fetchall()
    virtual = {name for name, sql in rows if (sql or "").upper().startswith("CREATE VIRTUAL TABLE")}
    shadows = {v + s for v in virtual for s in _FTS_SHADOWS}
    out = []
    for name, _sql in rows:
        if name in virtual and name.startswith("lex_"):  # a lexical index: its FTS5 table holds the data
            out.append(Table(name, LEXICAL_COLUMNS, ("pid",), rowid=True, fts=True))
            continue
        if name in virtual or name in shadows or _derived(name):
            continue
        info = c.execute(f"PRAGMA table_xinfo({name})").fetchall()  # cid name type notnull dflt pk hidden
        columns = [r[1] for r in info if r[6] == 0]  # hidden 2/3: generated columns (not copied)
        pk = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
        key = pk
        if len(pk) == 1 and next(r[2] for r in info if r[1] == pk[0]).upper() == "INTEGER":
            unique = _sqlite_unique(c, name)
            if unique:  # a row number beside a natural key: copy by the natural key, not the number
                key = unique
                columns.remove(pk[0])
        if not key:
            raise ValueError(f"table {name} has no primary key: it cannot be copied row by row")
        rowid = "WITHOUT ROWID" not in (_sql or "").upper()
        out.append(Table(name, tuple(columns), tuple(key), rowid))
    return out


def _sqlite_unique(c: Any, table: str) -> list[str]:
    for _seq, index, unique, origin, _partial in c.execute(f"PRAGMA index_list({table})").fetchall():
        if unique and origin == "u":  # a UNIQUE constraint of the table's definition
            return [r[2] for r in c.execute(f"PRAGMA index_info({index})").fetchall()]
    return []


def _pg_tables(c: Any) -> list[Table]:
    names = [
        r[0]
        for r in c.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            " AND table_type = 'BASE TABLE' ORDER BY table_name"
        ).fetchall()
    ]
    out = []
    for name in names:
        if _derived(name):
            continue
        columns = [
            r[0]
            for r in c.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
                " AND table_name = ? AND is_generated = 'NEVER' ORDER BY ordinal_position",
                (name,),
            ).fetchall()
        ]
        constraints = c.execute(
            "SELECT tc.constraint_type, kcu.column_name FROM information_schema.table_constraints tc"
            " JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name"
            " AND kcu.table_schema = tc.table_schema AND kcu.table_name = tc.table_name"
            " WHERE tc.table_schema = current_schema() AND tc.table_name = ?"
            " AND tc.constraint_type IN ('PRIMARY KEY', 'UNIQUE')"
            " ORDER BY tc.constraint_type, tc.constraint_name, kcu.ordinal_position",
            (name,),
        ).fetchall()
        pk = [col for kind, col in constraints if kind == "PRIMARY KEY"]
        unique = _first_unique(c, name)
        key = pk
        if len(pk) == 1 and unique and _pg_is_integer(c, name, pk[0]):
            key = unique
            columns.remove(pk[0])
        if not key:
            raise ValueError(f"table {name} has no primary key: it cannot be copied row by row")
        out.append(Table(name, tuple(columns), tuple(key)))
    return out


def _first_unique(c: Any, table: str) -> list[str]:
    rows = c.execute(
        "SELECT tc.constraint_name, kcu.column_name FROM information_schema.table_constraints tc"
        " JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name"
        " AND kcu.table_schema = tc.table_schema AND kcu.table_name = tc.table_name"
        " WHERE tc.table_schema = current_schema() AND tc.table_name = ? AND tc.constraint_type = 'UNIQUE'"
        " ORDER BY tc.constraint_name, kcu.ordinal_position",
        (table,),
    ).fetchall()
    if not rows:
        return []
    first = rows[0][0]
    return [col for name, col in rows if name == first]


def _pg_is_integer(c: Any, table: str, column: str) -> bool:
    row = c.execute(
        "SELECT data_type FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = ? AND column_name = ?",
        (table, column),
    ).fetchone()
    return bool(row) and row[0] in ("integer", "bigint", "smallint")


def text_key_collation(store: Any) -> str:
    """What to add after a text key in ORDER BY so rows come in the same order on both dialects
    (SQLite orders text by its UTF-8 bytes): nothing on SQLite or on a PostgreSQL database whose
    collation is byte-ordered, else `COLLATE "C"` (correct, but the key's index is not used)."""
    if dialect_of(store) != "postgresql":
        return ""
    collation = store.query("SELECT datcollate FROM pg_database WHERE datname = current_database()")[0][0]
    return "" if collation in BYTE_ORDER_COLLATIONS else ' COLLATE "C"'


# -- values, the same whatever the dialect stored them as -------------------------------------------
_PLAIN = (str, int, float, bytes, type(None))


def normal(column: str, value: object) -> object:
    """A value as both dialects give it back: bytes for BLOB/bytea (PostgreSQL: memoryview), int for
    a boolean, ISO text for a time, a float for a NUMERIC, canonical JSON for a parsed JSON value
    (knowtree's `*_json` columns are TEXT on both dialects: their text is compared as stored)."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, datetime):
        return (value.astimezone(UTC) if value.tzinfo else value).isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return value


def normal_row(columns: Sequence[str], row: Iterable[object]) -> tuple[object, ...]:
    return tuple(v if type(v) in _PLAIN else normal(col, v) for col, v in zip(columns, row, strict=True))


def encode_row(row: Sequence[object]) -> bytes:
    """A normalised row as bytes for a content hash: its `repr` (str, int, float, bytes and None
    each written unambiguously, strings quoted and escaped), so no two different rows encode alike."""
    return repr(tuple(row)).encode("utf-8", "backslashreplace")


__all__ = ["PARENTS", "Table", "encode_row", "list_tables", "normal", "normal_row", "text_key_collation"]
