"""A tree index's sync: `sync_entries(conn, tree)` derives the saved tree's entries
(`retrieve.context`) and rewrites only those whose content hash changed, in the store's save
transaction (see `retrieve.treeindex` for the whole design); `signature` tells when a tree changed
since it was indexed."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from knowtree.retrieve.context import (
    ENTRY_FORMAT,
    PIECE_CHARS,
    Entry,
    body_hashes,
    cite_json,
    row_hash,
    tree_entries,
)
from knowtree.retrieve.indexreuse import LeafReuse
from knowtree.retrieve.indexwrite import (
    WRITE_EMBEDDER,
    embed_missing,
    prepare_ann_index,
    write_ann_index,
    write_embedder,
    write_entries,
    write_leaf_counts,
)
from knowtree.store.treeindex_tables import tables
from knowtree.types import Node, content_hash

if TYPE_CHECKING:
    from knowtree.retrieve.embed import Embedder


@dataclass(slots=True)
class SyncReport:
    entries: int = 0
    written: int = 0  # entries added or whose text changed (indexed again)
    removed: int = 0
    moved: int = 0  # same text under a new parent or position: row updated, not re-indexed
    unchanged: bool = False  # the nodes were those last indexed: no entry derived, none written
    reused: int = 0  # entries of leaves whose inputs did not change: neither derived nor written
    embedded: int = 0  # entries embedded by the default embedder (their vectors written with them)


def _doc_context(conn: Any, tree: str) -> dict[str, str]:
    """A line per document of a collection (its metadata and description), by node id and by path."""
    sql = tables(conn)
    out: dict[str, str] = {}
    for path, node_id, description, meta_json in sql.doc_lines(conn, tree):
        meta = json.loads(meta_json or "{}")
        line = " ".join(
            [*(f"{k}: {v}" for k, v in meta.items() if v not in (None, "")), description or ""]
        ).strip()
        if line:
            out[node_id] = line
            out[path] = line
    return out


def signature(conn: Any, tree: str) -> str | None:
    """What tells whether `tree` changed since its index was synced: its root and `updated` time (one
    row, no count over the nodes: this runs before every question). Every write of a tree's nodes or
    of its document lines moves `updated` on, strictly (`store.rows.touched`: several writes within a
    second included), so an equal signature means the same rows; what the entries are derived from is
    compared exactly by the sync itself (the content fingerprint)."""
    row = tables(conn).tree_head(conn, tree)
    if row is None:
        return None
    return content_hash("index-head", str(row[0]), str(row[1]), str(PIECE_CHARS))


def _saved(nodes: Sequence[Node] | None, digests: dict[str, str]) -> dict[str, Node] | None:
    """The saved nodes by id when they are the tree's rows (same ids), else None (the rows are parsed)."""
    if nodes is None or len(nodes) != len(digests):
        return None
    by_id = {n.id: n for n in nodes}
    return by_id if by_id.keys() == digests.keys() else None


def row_digests(rows: Sequence[tuple]) -> dict[str, str]:
    """A hash of each node row (`SELECT {NODE_COLUMNS}`), by node id."""
    return {r[0]: hashlib.sha256("\x1f".join(map(str, r)).encode()).hexdigest() for r in rows}


def _fingerprint(digests: dict[str, str], root: str | None, docs: dict[str, str]) -> str:
    """Everything the entries are derived from: the node rows, the root, the document lines and the
    derivation's settings. Equal fingerprints derive equal entries."""
    h = hashlib.sha256()
    for part in (ENTRY_FORMAT, str(PIECE_CHARS), root or "", json.dumps(sorted(docs.items()))):
        h.update(part.encode())
        h.update(b"\x00")
    for node_id in sorted(digests):
        h.update(f"{node_id}:{digests[node_id]}\x1e".encode())
    return h.hexdigest()


def sync_entries(
    conn: Any,
    tree: str,
    nodes: Sequence[Node] | None = None,
    *,
    embedder: Embedder | str | None = WRITE_EMBEDDER,
) -> SyncReport:
    """Bring `tree`'s index up to date with its nodes, rewriting only changed entries.

    Runs on the caller's connection and transaction (the store's save), so a tree and its index
    are saved together or not at all. When the node rows are those last indexed (a rebuild that
    changed nothing) no entry is derived and none is written: only the state row's signature
    follows the tree's `updated` time. `nodes`: the tree's nodes as just saved (the store's save
    hook hands them over), used instead of parsing the rows again. `embedder` ("default": the
    project's default, skipped without the embedding extra; None: none): the entries written get
    their vectors in the same transaction, so no question embeds them.
    """
    sql = tables(conn)
    # the rows streamed: each row's digest, and its id and kind (all that is read of a row whose node
    # is in hand: `LeafReuse`); every row is read whole again only when the nodes are not in hand
    digests: dict[str, str] = {}
    rows: list[tuple] = []
    for row in sql.iter_node_rows(conn, tree):
        digests.update(row_digests([row]))
        rows.append(row[:2])
    head = sql.tree_head(conn, tree)
    root = head[0] if head else None
    docs = _doc_context(conn, tree)
    content = _fingerprint(digests, root, docs)
    sig = signature(conn, tree)
    state = sql.read_state(conn, tree)
    if sig is not None and state is not None and state[2] == content:
        if state[0] != sig:
            sql.set_signature(conn, tree, sig)
        write_ann_index(conn, tree, embedder, state[1])  # a tree indexed before it had its own
        return SyncReport(entries=state[1], unchanged=True)
    existing = {r[0]: r[1:] for r in sql.indexed(conn, tree)}
    saved = _saved(nodes, digests)
    if saved is None:
        rows = sql.node_rows(conn, tree)
    leaves = LeafReuse(rows, digests, existing, docs, saved)
    entries: list[Entry] = []
    if root is not None and root in leaves.nodes:
        entries = tree_entries(leaves.nodes, root, doc_context=docs, reuse=leaves.reuse, sources=leaves.keys)
    hashes = {}
    for e, body in zip(entries, body_hashes(entries), strict=True):
        hashes[e.id] = (body, e.row_hash(body))
    stale = [
        e
        for e in entries
        if e.id not in existing or existing[e.id][0] != hashes[e.id][1] or existing[e.id][4] != e.source
    ]
    # same text, new place (an ancestor's id changed): the row is updated, its FTS row and vectors stay
    moved = [e for e in stale if e.id in existing and existing[e.id][2] == hashes[e.id][0]]
    changed = [e for e in stale if not (e.id in existing and existing[e.id][2] == hashes[e.id][0])]
    wanted = {e.id for e in entries} | leaves.kept
    removed = [i for i in existing if i not in wanted]
    gone = [*removed, *(e.id for e in changed if e.id in existing)]
    sql.delete_entries(conn, [existing[i][1] for i in gone])
    # kept leaves under a new parent id: the entries naming it are re-pointed, their text untouched
    sql.repoint(
        conn,
        (
            (
                parent or None,
                row_hash(parent or None, existing[i][2], existing[i][7], bool(existing[i][5])),
                existing[i][1],
            )
            for i, parent in leaves.moves
        ),
    )
    sql.move(
        conn,
        (
            (
                e.node,
                e.parent,
                int(e.leaf),
                e.order,
                hashes[e.id][1],
                cite_json(e.cite),
                e.source,
                existing[e.id][1],
            )
            for e in moved
        ),
    )
    vectors_by = write_embedder(embedder)
    prepare_ann_index(conn, tree, vectors_by, len(entries) + len(leaves.kept))  # before any vector is written
    # the new entries and their vectors, batch by batch (the next batch embedded meanwhile)
    streamed = write_entries(
        conn,
        tree,
        [
            (
                tree,
                e.id,
                e.node,
                e.parent,
                int(e.leaf),
                e.order,
                hashes[e.id][1],
                hashes[e.id][0],
                e.text,
                e.context,
                cite_json(e.cite),
                e.source,
            )
            for e in changed
        ],
        vectors_by,
    )
    # a removed entry's vector goes, unless its text lives on under another id (a renamed ancestor):
    # it is reused by text below (or by `TreeIndex.vectors` for another embedder), then dropped
    texts = {h[0] for h in hashes.values()} | {existing[i][2] for i in leaves.kept}
    sql.drop_vectors(conn, tree, [i for i in removed if existing[i][2] not in texts])
    write_leaf_counts(conn, tree)
    # entries moved or kept without one (none where every entry is new: each was written with one)
    embedded = streamed + embed_missing(conn, tree, vectors_by, all_written=not existing and not leaves.kept)
    # a large tree's own approximate index, built once its vectors are all written (PostgreSQL)
    write_ann_index(conn, tree, vectors_by, len(entries) + len(leaves.kept))
    sql.write_state(
        conn,
        tree,
        sig,
        len(entries) + len(leaves.kept),
        datetime.now(UTC).isoformat(timespec="seconds"),
        content,
    )
    return SyncReport(
        entries=len(entries) + len(leaves.kept),
        written=len(changed),
        removed=len(removed),
        moved=len(moved) + len(leaves.moves),
        reused=len(leaves.kept),
        embedded=embedded,
    )


def drop_entries(conn: Any, tree: str) -> None:
    """Forget a tree's index (its tree is gone)."""
    sql = tables(conn)
    sql.drop_tree(conn, tree)
