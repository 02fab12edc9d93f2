"""The thorough part of `knowtree check` on a PostgreSQL store, read-only, after `postgres.check`
(it answers, its schema is one this knowtree knows).

SQLite's checks (store/guard.py: the file's header, `PRAGMA integrity_check`, the FTS5 index's own
check) are about one file's pages; PostgreSQL keeps its pages itself, so their equivalent here is:
every user table reads whole (a sequential scan of each), the nodes' full-text rows match their
nodes (none missing, none left over), and, where the `amcheck` extension is installed, every
B-tree index verified with `bt_index_check`. Page checksums and WAL are PostgreSQL's own
(`pg_amcheck`, `pg_checksums`)."""

from __future__ import annotations

from typing import Any

from knowtree.store.guard import CheckReport
from knowtree.store.tables import list_tables

PG_CHECKED = "every table read, full-text rows matched to nodes"


def deep_check(url: str, report: CheckReport) -> CheckReport:
    """Add to `report` (of `postgres.check`, which found the database readable) what reading every
    table finds; `report.checked` says what was checked."""
    from knowtree.store.postgres import PostgresStore

    try:
        store = PostgresStore(url)
    except Exception as exc:  # a clear line whatever failed: a refused connection, a schema
        report.problems.append(f"cannot be opened ({exc})")
        return report
    try:
        report.problems += _table_problems(store)
        report.checked = PG_CHECKED
        if store.query("SELECT 1 FROM pg_extension WHERE extname = 'amcheck'"):
            report.problems += _btree_problems(store)
            report.checked += ", B-tree indexes verified (amcheck)"
    finally:
        store.close()
    return report


def _table_problems(store: Any) -> list[str]:
    problems = []
    for table in list_tables(store):
        try:
            store.query(f"SELECT COUNT(*) FROM {table.name}")
        except Exception as exc:
            problems.append(f"table {table.name}: {exc}")
    missing, orphans = store.query(
        "SELECT (SELECT COUNT(*) FROM nodes n WHERE NOT EXISTS (SELECT 1 FROM nodes_fts f"
        " WHERE f.tree = n.tree AND f.id = n.id)), (SELECT COUNT(*) FROM nodes_fts f WHERE NOT EXISTS"
        " (SELECT 1 FROM nodes n WHERE n.tree = f.tree AND n.id = f.id))"
    )[0]
    if missing or orphans:
        problems.append(f"full-text rows: {missing} node(s) without one, {orphans} without a node")
    return problems


def _btree_problems(store: Any) -> list[str]:
    rows = store.query(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE a.amname = 'btree' AND n.nspname = current_schema()"
    )
    problems = []
    for (index,) in rows:
        try:
            store.query("SELECT bt_index_check(?::regclass)", (index,))
        except Exception as exc:
            problems.append(f"index {index}: {exc}")
    return problems


__all__ = ["PG_CHECKED", "deep_check"]
