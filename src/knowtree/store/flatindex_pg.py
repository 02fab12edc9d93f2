"""The flat passage indexes' tables on PostgreSQL: `store.flatindex`'s `LexicalTable` / `VectorTable`
(same methods, same meaning) in the tables of store/migrations_flat.py, shared by every index and keyed
by its name (`ix`), in the knowtree database itself (a knowledge base's indexes beside its rows).

Lexical ranking is SQLite FTS5's BM25, computed from postings as the tree index does
(store/bm25_pg.py): N, n_t and avgdl are the index's own, as they are those of an FTS5 table, and
ties keep the stored order (`seq`, SQLite's rowid). Vectors are float32 bytes (BYTEA), searched
exactly in numpy by retrieve/vectors.py, as on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from knowtree.store.bm25_pg import (
    Postings,
    add_postings,
    count_terms,
    drop_postings,
    remove_postings,
    weighted_query,
)
from knowtree.store.portable import upsert
from knowtree.store.rows import in_batches

POSTINGS = Postings("lex_terms", "lex_df", "lex_stats", "ix")
LexRow = tuple[str, str, str, str]
VecRow = tuple[str, str, str, bytes]


class _PgTable:
    """One named index in a PostgreSQL knowtree database (`store`: a `PostgresStore`), and its
    registry row. `owned`: the store was opened for this index (closed with it)."""

    registry = ""
    rows_table = ""
    kind = ""

    def __init__(self, store: Any, name: str, *, owned: bool = False) -> None:
        self.store = store
        self.path = store.path
        self.name = name
        self.table = f"{self.rows_table}[{name}]"
        self._owned = owned

    def close(self) -> None:
        if self._owned:
            self.store.close()

    def count(self) -> int:
        return int(
            self.store.query(f"SELECT COUNT(*) FROM {self.rows_table} WHERE ix = ?", (self.name,))[0][0]
        )

    def clear(self) -> None:
        """Remove every row of the index, and its registry row (it holds nothing known)."""
        self.store.write(self._clear)

    def _clear(self, c: Any) -> None:
        c.execute(f"DELETE FROM {self.rows_table} WHERE ix = ?", (self.name,))
        c.execute(f"DELETE FROM {self.registry} WHERE name = ?", (self.name,))

    def _forget(self, c: Any) -> None:
        c.execute(f"DELETE FROM {self.registry} WHERE name = ?", (self.name,))

    def _lock(self, c: Any) -> None:
        """Writers of one index one after another (its statistics are read-modify-write)."""
        c.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (f"knowtree flat index {self.name}",))


class PgLexicalTable(_PgTable):
    """`lex_rows` rows of one index, with their BM25 postings, and its `lexical_indexes` row."""

    registry = "lexical_indexes"
    rows_table = "lex_rows"
    kind = "lexical"

    def _clear(self, c: Any) -> None:
        self._lock(c)
        drop_postings(c, POSTINGS, self.name)
        super()._clear(c)

    def put(self, rows: Sequence[LexRow]) -> None:
        """Store rows (pid, doc, body, meta_json), each replacing the row of its pid (moved to the end
        of the stored order); the registry row goes (what the index holds changed)."""

        def write(c: Any) -> None:
            self._lock(c)
            self._delete(c, [r[0] for r in rows])
            counted = count_terms([r[2] for r in rows])
            c.executemany(
                "INSERT INTO lex_rows(ix, pid, doc, body, meta, toklen) VALUES (?, ?, ?, ?, ?, ?)",
                [(self.name, *row, length) for row, (_, length) in zip(rows, counted, strict=True)],
            )
            seq: dict[str, int] = {}
            for part, marks in in_batches([r[0] for r in rows], 500):
                seq.update(
                    c.execute(f"SELECT pid, seq FROM lex_rows WHERE ix = ? AND pid IN ({marks})", (self.name, *part))
                )
            seqs = [seq[r[0]] for r in rows]
            add_postings(c, POSTINGS, self.name, seqs, counted)
            self._forget(c)

        self.store.write(write)

    def _delete(self, c: Any, pids: Sequence[str]) -> None:
        for part, marks in in_batches(list(pids), 500):
            gone = c.execute(
                f"SELECT seq, toklen FROM lex_rows WHERE ix = ? AND pid IN ({marks})", (self.name, *part)
            ).fetchall()
            if gone:
                seqs = [int(r[0]) for r in gone]
                remove_postings(c, POSTINGS, seqs, [(self.name, len(gone), sum(int(r[1]) for r in gone))])
                c.execute(f"DELETE FROM lex_rows WHERE seq IN ({','.join('?' * len(seqs))})", seqs)

    def fingerprint(self) -> str | None:
        rows = self.store.query(f"SELECT fingerprint FROM {self.registry} WHERE name = ?", (self.name,))
        return rows[0][0] if rows else None

    def register(self, fingerprint: str, passages: int) -> None:
        self.store.write(
            lambda c: c.execute(
                upsert(self.registry, ("name", "fingerprint", "passages"), ("name",)),
                (self.name, fingerprint, passages),
            )
        )

    def search(
        self, terms: Sequence[str], k: int, docs: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        """(pid, BM25 as FTS5's `bm25()`: lower is better) of the `k` best rows holding any of the
        query words, ties in stored order; `docs` keeps rows of those documents only."""

        def read(c: Any) -> list[tuple[str, float]]:
            query = weighted_query(c, POSTINGS, self.name, terms)
            if query is None:
                return []
            args, scored = query
            where, extra = "", []
            if docs is not None:
                where = f" WHERE t.doc IN ({','.join('?' * len(docs))})"
                extra = list(docs)
            return [
                (str(r[0]), -float(r[1]))
                for r in c.execute(
                    f"SELECT t.pid, s.score FROM ({scored} GROUP BY p.rid) s JOIN lex_rows t ON t.seq = s.rid"
                    f"{where} ORDER BY s.score DESC, s.rid LIMIT ?",
                    (*args, *extra, k),
                ).fetchall()
            ]

        return self.store.read(read)

    def get(self, pid: str) -> LexRow | None:
        rows = self.store.query(
            "SELECT pid, doc, body, meta FROM lex_rows WHERE ix = ? AND pid = ?", (self.name, pid)
        )
        return rows[0] if rows else None

    def rows(self) -> list[LexRow]:
        """Every row, in stored order, read in one query."""
        return self.store.query(
            "SELECT pid, doc, body, meta FROM lex_rows WHERE ix = ? ORDER BY seq", (self.name,)
        )

    def version(self) -> tuple[int, int, int]:
        """(rows, largest seq, total text length): changes when rows are added, replaced or removed."""
        row = self.store.query(
            "SELECT COUNT(*), COALESCE(MAX(seq), 0), COALESCE(SUM(LENGTH(body)), 0) FROM lex_rows WHERE ix = ?",
            (self.name,),
        )[0]
        return int(row[0]), int(row[1]), int(row[2])

    def ids(self) -> Iterator[str]:
        return (
            str(r[0])
            for r in self.store.query("SELECT pid FROM lex_rows WHERE ix = ? ORDER BY seq", (self.name,))
        )


class PgVectorTable(_PgTable):
    """`vec_rows` rows of one index and its `vector_indexes` row."""

    registry = "vector_indexes"
    rows_table = "vec_rows"
    kind = "vector"

    def put(self, rows: Sequence[VecRow]) -> None:
        """Store rows (pid, doc, embedder, vector bytes), each replacing the row of its pid (moved to
        the end of the stored order, as the lexical table does); the registry row goes."""

        def write(c: Any) -> None:
            for part, marks in in_batches([r[0] for r in rows], 500):
                c.execute(f"DELETE FROM vec_rows WHERE ix = ? AND pid IN ({marks})", (self.name, *part))
            c.executemany(
                "INSERT INTO vec_rows(ix, pid, doc, embedder, vec) VALUES (?, ?, ?, ?, ?)",
                [(self.name, *r) for r in rows],
            )
            self._forget(c)

        self.store.write(write)

    def registered(self) -> tuple[str, str] | None:
        """(fingerprint, embedder id) of what the index holds, when known."""
        rows = self.store.query(
            f"SELECT fingerprint, embedder FROM {self.registry} WHERE name = ?", (self.name,)
        )
        return (rows[0][0], rows[0][1]) if rows else None

    def register(self, fingerprint: str, embedder: str, dim: int, passages: int) -> None:
        self.store.write(
            lambda c: c.execute(
                upsert(self.registry, ("name", "fingerprint", "embedder", "dim", "passages"), ("name",)),
                (self.name, fingerprint, embedder, dim, passages),
            )
        )

    def rows(self, embedder: str) -> list[tuple[str, str, bytes]]:
        """(pid, doc, vector bytes) of every vector of `embedder`, in stored order."""
        return [
            (r[0], r[1], bytes(r[2]))
            for r in self.store.query(
                "SELECT pid, doc, vec FROM vec_rows WHERE ix = ? AND embedder = ? ORDER BY seq",
                (self.name, embedder),
            )
        ]


__all__ = ["PgLexicalTable", "PgVectorTable"]
