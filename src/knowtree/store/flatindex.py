"""The tables of the flat passage indexes (retrieve/bm25.py's `LexicalIndex`, retrieve/vectors.py's
`VectorIndex`): an SQLite file of their own (or ":memory:", or a knowtree database), one table per
named index (created by `create_lexical_index` / `create_vector_index` in store/migrations.py) plus
the registry rows saying what each index holds.

retrieve/ keeps the algorithms (query terms, fingerprints, embedding, scoring); the SQL is here.
The lexical table is SQLite FTS5 (its BM25 ranking is the baseline every method is measured
against). In a PostgreSQL knowtree database the same indexes are kept by store/flatindex_pg.py,
which computes FTS5's BM25 in SQL: `lexical_table` / `vector_table` pick the implementation.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from knowtree.errors import StoreError
from knowtree.store.dialect import is_url
from knowtree.store.migrations import create_lexical_index, create_vector_index
from knowtree.store.portable import upsert

#: (pid, doc, body, meta_json): a lexical row as stored and as read back
LexRow = tuple[str, str, str, str]
#: (pid, doc, embedder id, float32 bytes)
VecRow = tuple[str, str, str, bytes]


def match_expression(terms: Sequence[str]) -> str:
    """An FTS5 MATCH string that ORs the terms, each quoted so no FTS5 syntax can leak in."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def _postgres(where: Any) -> tuple[Any, bool] | None:
    """(a PostgreSQL store, whether it was opened here) for `where` (a `PostgresStore`, or a
    postgresql:// URL, opened with a pool of one); None for an SQLite file or ":memory:"."""
    if getattr(where, "dialect", None) == "postgresql":
        return where, False
    if isinstance(where, str) and is_url(where):
        from knowtree.store.postgres import PostgresStore

        return PostgresStore(where, pool_size=1), True
    return None


def lexical_table(where: str | Path | Any, name: str) -> Any:
    """The lexical index `name` in `where`: an SQLite file, ":memory:", a postgresql:// URL or a
    PostgreSQL store (`flatindex_pg.PgLexicalTable`)."""
    pg = _postgres(where)
    if pg is None:
        return LexicalTable(str(where), name)
    from knowtree.store.flatindex_pg import PgLexicalTable

    return PgLexicalTable(pg[0], name, owned=pg[1])


def vector_table(where: str | Path | Any, name: str) -> Any:
    """The vector index `name` in `where` (as `lexical_table`)."""
    pg = _postgres(where)
    if pg is None:
        return VectorTable(str(where), name)
    from knowtree.store.flatindex_pg import PgVectorTable

    return PgVectorTable(pg[0], name, owned=pg[1])


def connect(path: str) -> sqlite3.Connection:
    """An autocommit connection for an index file (WAL, so readers never block the writer) or ":memory:"."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    if path != ":memory:":
        conn.execute("PRAGMA journal_mode = WAL")
    return conn


class _Table:
    """One named index's table in an SQLite file, and its row in the registry `registry`."""

    registry = ""
    kind = ""

    def __init__(self, path: str, name: str) -> None:
        self.path = path
        self.name = name
        try:
            self._conn = connect(path)
            self.table = self._create(name)
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot open a {self.kind} index there ({exc})") from exc

    def _create(self, name: str) -> str:
        raise NotImplementedError

    def close(self) -> None:
        self._conn.close()

    def count(self) -> int:
        return int(self._conn.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0])

    def clear(self) -> None:
        """Remove every row of the index, and its registry row (it holds nothing known)."""
        self._conn.execute(f"DELETE FROM {self.table}")
        self._conn.execute(f"DELETE FROM {self.registry} WHERE name = ?", (self.name,))

    def _write(self, statements: Sequence[tuple[str, Sequence[Sequence[object]]]]) -> None:
        """Run `(sql, rows)` pairs in one transaction (rolled back if one fails)."""
        c = self._conn
        c.execute("BEGIN")
        try:
            for sql, rows in statements:
                c.executemany(sql, rows)
        except BaseException:
            c.execute("ROLLBACK")
            raise
        c.execute("COMMIT")


class LexicalTable(_Table):
    """An FTS5 table `lex_NAME(pid, doc, body, meta)` and its `lexical_indexes` row."""

    registry = "lexical_indexes"
    kind = "lexical"

    def _create(self, name: str) -> str:
        return create_lexical_index(self._conn, name)

    def put(self, rows: Sequence[LexRow]) -> None:
        """Store rows (pid, doc, body, meta_json), each replacing the row of its pid (moved to the end
        of the stored order); the registry row goes (what the index holds changed)."""
        existing = (
            {r[0] for r in self._conn.execute(f"SELECT pid FROM {self.table}")} if self.count() else set()
        )
        replaced = [(r[0],) for r in rows if r[0] in existing]
        self._write(
            [
                (f"DELETE FROM {self.table} WHERE pid = ?", replaced),
                (f"INSERT INTO {self.table}(pid, doc, body, meta) VALUES (?, ?, ?, ?)", rows),
                (f"DELETE FROM {self.registry} WHERE name = ?", [(self.name,)]),
            ]
        )

    def fingerprint(self) -> str | None:
        row = self._conn.execute(
            f"SELECT fingerprint FROM {self.registry} WHERE name = ?", (self.name,)
        ).fetchone()
        return row[0] if row else None

    def register(self, fingerprint: str, passages: int) -> None:
        self._conn.execute(
            upsert(self.registry, ("name", "fingerprint", "passages"), ("name",)),
            (self.name, fingerprint, passages),
        )

    def search(
        self, terms: Sequence[str], k: int, docs: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        """(pid, FTS5 bm25) of the `k` best rows holding any of the query words (lower is better),
        ties in stored order; `docs` keeps rows of those documents only."""
        match = match_expression(terms)
        sql = f"SELECT pid, bm25({self.table}) AS s FROM {self.table} WHERE {self.table} MATCH ?"
        args: list[object] = [match]
        if docs is not None:
            sql += f" AND doc IN ({','.join('?' * len(docs))})"
            args.extend(docs)
        sql += " ORDER BY s, rowid LIMIT ?"
        args.append(k)
        try:
            rows = self._conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:  # should not happen: every term is quoted
            raise StoreError(f"lexical search failed for {match[:80]!r} ({exc})") from exc
        return [(str(r[0]), float(r[1])) for r in rows]

    def get(self, pid: str) -> LexRow | None:
        return self._conn.execute(
            f"SELECT pid, doc, body, meta FROM {self.table} WHERE pid = ?", (pid,)
        ).fetchone()

    def rows(self) -> list[LexRow]:
        """Every row, in stored order, read in one query."""
        return self._conn.execute(f"SELECT pid, doc, body, meta FROM {self.table} ORDER BY rowid").fetchall()

    def version(self) -> tuple[int, int, int]:
        """(rows, largest rowid, total text length): changes when rows are added, replaced or removed."""
        row = self._conn.execute(
            f"SELECT COUNT(*), COALESCE(MAX(rowid), 0), COALESCE(SUM(LENGTH(body)), 0) FROM {self.table}"
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    def ids(self) -> Iterator[str]:
        return (str(r[0]) for r in self._conn.execute(f"SELECT pid FROM {self.table} ORDER BY rowid"))


class VectorTable(_Table):
    """A table `vec_NAME(pid, doc, embedder, vec)` and its `vector_indexes` row."""

    registry = "vector_indexes"
    kind = "vector"

    def _create(self, name: str) -> str:
        return create_vector_index(self._conn, name)

    def put(self, rows: Sequence[VecRow]) -> None:
        """Store rows (pid, doc, embedder, vector bytes), each replacing the row of its pid (moved to
        the end of the stored order, as the lexical table does); the registry row goes."""
        self._write(
            [
                (f"DELETE FROM {self.table} WHERE pid = ?", [(r[0],) for r in rows]),
                (f"INSERT INTO {self.table}(pid, doc, embedder, vec) VALUES (?, ?, ?, ?)", rows),
                (f"DELETE FROM {self.registry} WHERE name = ?", [(self.name,)]),
            ]
        )

    def registered(self) -> tuple[str, str] | None:
        """(fingerprint, embedder id) of what the index holds, when known."""
        row = self._conn.execute(
            f"SELECT fingerprint, embedder FROM {self.registry} WHERE name = ?", (self.name,)
        ).fetchone()
        return (row[0], row[1]) if row else None

    def register(self, fingerprint: str, embedder: str, dim: int, passages: int) -> None:
        self._conn.execute(
            upsert(self.registry, ("name", "fingerprint", "embedder", "dim", "passages"), ("name",)),
            (self.name, fingerprint, embedder, dim, passages),
        )

    def rows(self, embedder: str) -> list[tuple[str, str, bytes]]:
        """(pid, doc, vector bytes) of every vector of `embedder`, in stored order."""
        return self._conn.execute(
            f"SELECT pid, doc, vec FROM {self.table} WHERE embedder = ? ORDER BY rowid", (embedder,)
        ).fetchall()


__all__ = [
    "LexRow",
    "LexicalTable",
    "VecRow",
    "VectorTable",
    "connect",
    "lexical_table",
    "match_expression",
    "vector_table",
]
