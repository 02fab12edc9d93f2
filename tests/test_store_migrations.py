"""The index tables are created in store/migrations.py (tests/test_architecture.py checks that no
other module creates one), and a database made before they moved there keeps working."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from knowtree.retrieve.bm25 import LexicalIndex
from knowtree.retrieve.vectors import VectorIndex
from knowtree.store import SQLiteStore
from knowtree.store.migrations import MIGRATIONS, create_lexical_index, create_vector_index, migrate

PASSAGES = [("p1", "Alice approved the budget"), ("p2", "The launch was in Lisbon")]


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple]:
    return [tuple(r[1:]) for r in conn.execute(f"PRAGMA table_info({table})")]


def test_index_registries_are_the_same_from_the_migration_and_from_an_index_file() -> None:
    migrated = sqlite3.connect(":memory:", isolation_level=None)
    migrate(migrated)
    bare = sqlite3.connect(":memory:", isolation_level=None)
    assert create_lexical_index(bare, "x") == "lex_x"
    assert create_vector_index(bare, "x") == "vec_x"
    for table in ("lexical_indexes", "vector_indexes"):
        assert _columns(migrated, table) == _columns(bare, table)


def test_a_database_whose_indexes_made_their_own_tables_migrates(tmp_path: Path) -> None:
    """The layout the previous release left: schema version before the index migration, registries
    created by the indexes (same DDL, no IF NOT EXISTS) next to the store's tables."""
    db = tmp_path / "kb.db"
    conn = sqlite3.connect(db, isolation_level=None)
    before = next(i for i, script in enumerate(MIGRATIONS) if "lexical_indexes" in script)
    for number, script in enumerate(MIGRATIONS[:before], start=1):
        for statement in (s.strip() for s in script.split(";")):
            if statement:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
    conn.execute("CREATE TABLE lexical_indexes(name TEXT PRIMARY KEY, fingerprint TEXT, passages INTEGER)")
    conn.execute(
        "CREATE TABLE vector_indexes(name TEXT PRIMARY KEY, fingerprint TEXT, embedder TEXT, dim INTEGER, passages INTEGER)"
    )
    conn.close()
    with LexicalIndex(db, name="corpus") as index:
        assert index.ensure(PASSAGES)
    with VectorIndex(db, name="corpus", embedder="hash") as vectors:
        assert vectors.ensure(PASSAGES)
    store = SQLiteStore(db)
    assert store.query("PRAGMA user_version") == [(len(MIGRATIONS),)]
    store.close()
    with LexicalIndex(db, name="corpus") as index:
        assert not index.ensure(PASSAGES)  # still current: nothing indexed again
        assert index.search("Who approved the budget?", k=1)[0][0] == "p1"
    with VectorIndex(db, name="corpus", embedder="hash") as vectors:
        assert not vectors.ensure(PASSAGES)


class _MigratedMeanwhile:
    """A connection on which, right after `migrate` first reads the schema version, another
    connection migrates the same file: two processes opening one new database at once."""

    def __init__(self, conn: sqlite3.Connection, other: sqlite3.Connection) -> None:
        self.conn, self.other, self.interleaved = conn, other, False

    def execute(self, sql: str, *args: object) -> object:
        cursor = self.conn.execute(sql, *args)
        if sql.startswith("PRAGMA user_version") and not self.interleaved:
            self.interleaved = True
            rows = cursor.fetchall()
            migrate(self.other)
            return _Rows(rows)
        return cursor


class _Rows:
    def __init__(self, rows: list[tuple]) -> None:
        self.rows = rows

    def fetchone(self) -> tuple:
        return self.rows[0]


def test_a_new_file_migrated_by_another_process_meanwhile_is_migrated_once(tmp_path: Path) -> None:
    """`migrate` read version 0, another process then migrated the file to the latest version: the
    first one applies nothing again (it failed with "duplicate column name" when a build's driver and
    its Ray worker opened one new SQLite file at once) and the schema is the one migration's."""
    path = tmp_path / "new.db"
    first = sqlite3.connect(path, isolation_level=None, timeout=10)
    second = sqlite3.connect(path, isolation_level=None, timeout=10)
    assert migrate(_MigratedMeanwhile(first, second)) == len(MIGRATIONS)  # type: ignore[arg-type]
    assert first.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    reference = sqlite3.connect(tmp_path / "reference.db", isolation_level=None)
    migrate(reference)
    schema = "SELECT type, name, sql FROM sqlite_master ORDER BY type, name"
    assert first.execute(schema).fetchall() == reference.execute(schema).fetchall()
    for conn in (first, second, reference):
        conn.close()


def test_processes_opening_one_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    """Four processes open one new database at the same moment: every one opens it."""
    import multiprocessing

    path = tmp_path / "shared.db"
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_open_after, args=(str(path), start, results)) for _ in range(4)]
    for proc in procs:
        proc.start()
    got = sorted(str(results.get(timeout=60)) for _ in procs)
    for proc in procs:
        proc.join(30)
    assert got == [str(len(MIGRATIONS))] * 4


def _open_after(path: str, start: object, results: object) -> None:
    start.wait()  # type: ignore[attr-defined]
    try:
        store = SQLiteStore(path)
        results.put(store.query("PRAGMA user_version")[0][0])  # type: ignore[attr-defined]
        store.close()
    except Exception as exc:  # reported to the test, which names it
        results.put(f"{type(exc).__name__}: {exc}")  # type: ignore[attr-defined]
