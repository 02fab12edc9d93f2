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
