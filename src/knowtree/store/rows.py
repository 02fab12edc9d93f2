"""How nodes and messages are laid out in rows: the `nodes` table, its `nodes_fts` full-text twin
and the `messages` table (migrations 1, 3 and 5; PostgreSQL's baseline).

The full-text twin differs by dialect (`store/dialect.py`): on SQLite an FTS5 table whose rowid is
the node row's rowid; on PostgreSQL a table keyed by (tree, id) with a generated `tsvector` column
(GIN index), its rows going with their node's by cascade.

One place for the row format, used by `SQLiteStore` and by readers that load a tree's nodes on
a connection they were handed (the tree index in `retrieve/treeindex.py`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, TypeVar

from pydantic import TypeAdapter

from knowtree.store.dialect import POSTGRESQL, dialect_of
from knowtree.types import Node, NodeKind, NodeMeta, Span

T = TypeVar("T")

NODE_COLUMNS = "id, kind, level, children_json, meta_json, text, spans_json"
MESSAGE_KEYS = "position role name content timestamp time session source_id attachment node_id".split()


@cache
def _spans() -> TypeAdapter[list[Span]]:
    """A node's spans to and from their JSON in one call into pydantic's core (a one-span node: 1.8
    microseconds written, 3.9 read; a dict per span with `json.dumps` / `model_validate` took 6.1 and
    10.1, benchmarks/RESULTS.md "E9 at 10^6 leaves with the postings in blocks")."""
    return TypeAdapter(list[Span])


def node_from_row(row: tuple) -> Node:
    """A node from a row of `SELECT {NODE_COLUMNS} FROM nodes`."""
    node_id, kind, level, children_json, meta_json, text, spans_json = row
    return Node(
        id=node_id,
        kind=NodeKind(kind),
        level=level,
        children=json.loads(children_json),
        meta=NodeMeta.model_validate_json(meta_json),
        text=text,
        spans=_spans().validate_json(spans_json),
    )


def load_tree_nodes(c: Any, tree: str, ids: Collection[str] | None = None) -> dict[str, Node]:
    """Every node of `tree` by id, or only those of `ids` that exist (no existence check: a missing
    tree has none)."""
    if ids is None:
        rows = c.execute(f"SELECT {NODE_COLUMNS} FROM nodes WHERE tree = ?", (tree,)).fetchall()
    else:
        rows = []
        for part, marks in in_batches(list(dict.fromkeys(ids))):
            sql = f"SELECT {NODE_COLUMNS} FROM nodes WHERE tree = ? AND id IN ({marks})"
            rows.extend(c.execute(sql, (tree, *part)).fetchall())
    return {r[0]: node_from_row(r) for r in rows}


def in_batches(values: Sequence[T], size: int = 500) -> Iterator[tuple[list[T], str]]:
    """`values` in slices of at most `size` (under SQLite's bound-parameter limit), each with the
    `?,?,…` marks of its `IN (...)`."""
    for i in range(0, len(values), size):
        part = list(values[i : i + size])
        yield part, ",".join("?" * len(part))


def fts_body(node: Node) -> str:
    """The text a node's full-text row holds: its metadata fields, then its text."""
    m = node.meta
    fields = [m.summary, *m.content_types, *m.critical_actions, *m.decisions, *m.noteworthy_events, *m.about]
    return "\n".join([*fields, node.text])


NODE_ROW = ("tree", "id", "kind", "level", "position", "parent", "children_json", "meta_json", "text", "spans_json")


def insert_nodes(
    c: Any,
    name: str,
    nodes: Sequence[Node],
    parents: Mapping[str, str],
    positions: Mapping[str, int],
) -> None:
    """Write nodes and their full-text rows (the caller deleted any previous rows with these ids)."""
    rows = (
        (
            name,
            n.id,
            n.kind.value,
            n.level,
            positions.get(n.id, 0),
            parents.get(n.id),
            json.dumps(n.children),
            n.meta.model_dump_json(),
            n.text,
            _spans().dump_json(n.spans).decode(),
        )
        for n in nodes
    )  # a generator: COPY streams it, no list of every row's JSON is held
    if dialect_of(c) == POSTGRESQL:  # COPY: a tree of 10,000 nodes is written in one stream
        c.copy_rows("nodes", NODE_ROW, rows)
        c.copy_rows("nodes_fts", ("tree", "id", "body"), ((name, n.id, fts_body(n)) for n in nodes))
        return
    last = c.execute("SELECT COALESCE(MAX(rowid), 0) FROM nodes").fetchone()[0]  # new rows come after
    c.executemany(
        f"INSERT INTO nodes({', '.join(NODE_ROW)}) VALUES ({', '.join('?' * len(NODE_ROW))})", rows
    )
    # a full-text row is keyed by its node row's rowid: replaced and deleted by key, never by a scan.
    # The rowids are read back and the rows given as VALUES, in rowid order: an `INSERT INTO nodes_fts
    # … SELECT rowid … WHERE id = ?` per node materializes its SELECT each time (115k nodes: 8.0 s
    # against 2.1 s, benchmarks/RESULTS.md)
    written = dict(c.execute("SELECT id, rowid FROM nodes WHERE rowid > ? AND tree = ?", (last, name)).fetchall())
    if len(written) == len(nodes):
        c.executemany(
            "INSERT INTO nodes_fts(rowid, tree, id, body) VALUES (?, ?, ?, ?)",
            sorted((written[n.id], name, n.id, fts_body(n)) for n in nodes),
        )
        return
    c.executemany(  # rowids not above the last (SQLite's rowid past its largest): looked up one by one
        "INSERT INTO nodes_fts(rowid, tree, id, body) SELECT rowid, tree, id, ? FROM nodes"
        " WHERE tree = ? AND id = ?",
        [(fts_body(n), name, n.id) for n in nodes],
    )


def delete_nodes(c: Any, name: str, ids: Sequence[str]) -> None:
    """Remove nodes of `name` by id, their full-text rows first (keyed by the node row's rowid)."""
    gone = [(name, i) for i in ids]
    if dialect_of(c) == POSTGRESQL:  # its full-text row goes by cascade
        c.executemany("DELETE FROM nodes WHERE tree = ? AND id = ?", gone)
        return
    c.executemany(
        "DELETE FROM nodes_fts WHERE rowid = (SELECT rowid FROM nodes WHERE tree = ? AND id = ?)", gone
    )
    c.executemany("DELETE FROM nodes WHERE tree = ? AND id = ?", gone)


def delete_tree_fts(c: Any, name: str) -> None:
    """Remove a tree's full-text rows by key (its node rows are found through their index)."""
    if dialect_of(c) == POSTGRESQL:
        c.execute("DELETE FROM nodes_fts WHERE tree = ?", (name,))
        return
    c.execute("DELETE FROM nodes_fts WHERE rowid IN (SELECT rowid FROM nodes WHERE tree = ?)", (name,))


def touched(previous: str | None) -> str:
    """A tree's next `updated` time after an in-place change: now, to the microsecond, and always
    after `previous`, so whatever compares it (the tree index's signature, the server's cached views)
    sees every change, several within one second included."""
    now = datetime.now(UTC)
    try:
        before = datetime.fromisoformat(previous) if previous else None
    except ValueError:  # not a time we wrote: any new value differs from it
        before = None
    if before is not None and before.tzinfo is not None and now <= before:
        now = before + timedelta(microseconds=1)
    return now.isoformat(timespec="microseconds")


def touch_tree(c: Any, name: str) -> None:
    """Mark the tree `name` changed in place (its `updated` time moves on: `touched`)."""
    row = c.execute("SELECT updated FROM trees WHERE name = ?", (name,)).fetchone()
    if row is not None:
        c.execute("UPDATE trees SET updated = ? WHERE name = ?", (touched(row[0]), name))


def update_node_meta(c: Any, name: str, node: Node, meta: NodeMeta) -> None:
    """Replace one node's metadata and refresh its full-text row (its node row exists), by key; the
    tree is marked changed (`touch_tree`), so its index re-derives what the new metadata changed."""
    c.execute(
        "UPDATE nodes SET meta_json = ? WHERE tree = ? AND id = ?", (meta.model_dump_json(), name, node.id)
    )
    where = "tree = ? AND id = ?" if dialect_of(c) == POSTGRESQL else (
        "rowid = (SELECT rowid FROM nodes WHERE tree = ? AND id = ?)"
    )
    c.execute(
        f"UPDATE nodes_fts SET body = ? WHERE {where}",
        (fts_body(node.model_copy(update={"meta": meta})), name, node.id),
    )
    touch_tree(c, name)


def message_row(name: str, m: Mapping[str, object]) -> tuple[object, ...]:
    """A `messages` row (tree first, then MESSAGE_KEYS, then the add key) from a message dict;
    optional keys may be absent."""
    return (
        name,
        m["position"],
        m["role"],
        m.get("name"),
        m["content"],
        m.get("timestamp"),
        m.get("time"),
        m.get("session"),
        m.get("source_id"),
        m.get("attachment"),
        m["node_id"],
        m.get("add_key"),
    )
