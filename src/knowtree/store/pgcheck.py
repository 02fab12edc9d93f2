"""`knowtree check` on a PostgreSQL store: what can be checked there, read-only.

SQLite's checks (store/guard.py: the file's header, `PRAGMA integrity_check`, the FTS5 index's own
check) are about one file's pages; PostgreSQL keeps its pages itself, so their equivalent here is:
the database answers and its schema is knowtree's at this version (opening the store checks it),
every user table reads whole (a sequential scan of each), the nodes' full-text rows match their
nodes (none missing, none left over), and, where the `amcheck` extension is installed, every
B-tree index of knowtree's tables verified with `bt_index_check`. Page checksums and WAL are
PostgreSQL's own (`pg_amcheck`, `pg_checksums`)."""

from __future__ import annotations

from knowtree.store import guard
from knowtree.store.dialect import is_url
from knowtree.store.guard import CheckReport
from knowtree.store.tables import list_tables

PG_CHECKED = "every table read, full-text rows matched to nodes"


def full_check(target: str) -> CheckReport:
    """`knowtree check` of a store target: an SQLite file (store/guard.py) or a PostgreSQL URL."""
    return full_check_postgres(target) if is_url(target) else guard.full_check(target)


def full_check_postgres(url: str) -> CheckReport:
    from knowtree.store.opening import open_store

    problems: list[str] = []
    try:
        store = open_store(url)
    except Exception as exc:  # a clear line whatever failed: a URL, a refused connection, a schema
        return CheckReport(url, [f"cannot be opened ({exc})"], checked=PG_CHECKED)
    try:
        for table in list_tables(store):
            try:
                store.query(f"SELECT COUNT(*) FROM {table.name}")
            except Exception as exc:
                problems.append(f"table {table.name}: {exc}")
        orphans = store.query(
            "SELECT (SELECT COUNT(*) FROM nodes n WHERE NOT EXISTS (SELECT 1 FROM nodes_fts f"
            " WHERE f.tree = n.tree AND f.id = n.id)), (SELECT COUNT(*) FROM nodes_fts f WHERE NOT EXISTS"
            " (SELECT 1 FROM nodes n WHERE n.tree = f.tree AND n.id = f.id))"
        )[0]
        if orphans[0] or orphans[1]:
            problems.append(f"full-text rows: {orphans[0]} node(s) without one, {orphans[1]} without a node")
        checked = PG_CHECKED
        if store.query("SELECT 1 FROM pg_extension WHERE extname = 'amcheck'"):
            problems += _btree_problems(store)
            checked += ", B-tree indexes verified (amcheck)"
        trees = int(store.query("SELECT COUNT(*) FROM trees")[0][0])
    finally:
        store.close()
    return CheckReport(url, problems, trees=trees, checked=checked)


def _btree_problems(store: object) -> list[str]:
    rows = store.query(  # type: ignore[attr-defined]
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE a.amname = 'btree' AND n.nspname = current_schema()"
    )
    problems = []
    for (index,) in rows:
        try:
            store.query("SELECT bt_index_check(?::regclass)", (index,))  # type: ignore[attr-defined]
        except Exception as exc:
            problems.append(f"index {index}: {exc}")
    return problems


__all__ = ["PG_CHECKED", "full_check", "full_check_postgres"]
