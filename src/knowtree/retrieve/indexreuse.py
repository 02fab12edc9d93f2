"""Incremental derivation of a tree's index entries (`treeindex.sync_entries`): a leaf whose inputs
did not change keeps its indexed entries, is never parsed and never derived again.

A leaf's entries depend on its node row and on where it sits: the order of its first piece, its
ancestors' labels, document lines and summaries, the derivation's settings, and its parent's id. `LeafReuse` hashes all of that into one key per leaf, stored on every entry of the leaf
(`tree_index.src`); `context.tree_entries` asks `LeafReuse.reuse` before reading each node, so
only new or changed leaves (and the inner nodes, whose entries are cheap) are parsed and derived.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from knowtree.retrieve.context import ENTRY_FORMAT, PIECE_CHARS
from knowtree.store.rows import node_from_row
from knowtree.types import Node, NodeKind, content_hash


class LazyNodes(Mapping[str, Node]):
    """Node rows by id, each parsed the first time it is read (`parsed`: nodes already in hand, the
    ones a save just wrote, are never parsed)."""

    def __init__(self, rows: dict[str, tuple], parsed: dict[str, Node] | None = None) -> None:
        self.rows = rows
        self.parsed: dict[str, Node] = parsed if parsed is not None else {}

    def __getitem__(self, key: str) -> Node:
        node = self.parsed.get(key)
        if node is None:
            node = self.parsed[key] = node_from_row(self.rows[key])
        return node

    def __contains__(self, key: object) -> bool:
        return key in self.rows

    def __iter__(self) -> Iterator[str]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


class LeafReuse:
    """Which leaves' entries can stay as indexed: a leaf's key hashes its node row and everything its
    entries' text, context and order are derived from besides (first piece's order, ancestors'
    labels, document lines and summaries, the settings); every entry of a leaf carries it in `src`.
    Its parent is not in the key: a kept leaf under a new parent id (a rebuilt branch or root) has
    the entries that name it re-pointed (`moves`), as a derivation would."""

    def __init__(
        self,
        rows: Sequence[tuple],
        digests: dict[str, str],
        existing: dict[str, tuple[Any, ...]],
        docs: dict[str, str],
        saved: dict[str, Node] | None = None,
    ) -> None:
        self.nodes = LazyNodes({r[0]: r for r in rows}, saved)
        self.digests = digests  # node id -> hash of its row (`treeindex.row_digests`)
        self.docs = content_hash(json.dumps(sorted(docs.items())))
        self.keys: dict[str, str] = {}
        self.kept: set[str] = set()
        self.moves: list[tuple[str, str]] = []  # (entry id, new parent)
        # leaf node -> its entries: (id, src, leaf, parent)
        self.indexed: dict[str, list[tuple[str, str, int, str | None]]] = {}
        for entry_id, row in existing.items():
            self.indexed.setdefault(row[3], []).append((entry_id, row[4], int(row[5]), row[6]))

    def reuse(self, node_id: str, parent: str | None, order: int, trail_key: str) -> tuple[int, str] | None:
        row = self.nodes.rows.get(node_id)
        if row is None or row[1] != NodeKind.LEAF.value:
            return None
        key = content_hash(
            "src",
            ENTRY_FORMAT,
            str(PIECE_CHARS),
            self.docs,
            self.digests[node_id],
            str(order),
            trail_key,
            length=32,
        )
        self.keys[node_id] = key
        indexed = self.indexed.get(node_id, [])
        pieces = sum(leaf for _, _, leaf, _ in indexed)
        if not pieces or any(src != key for _, src, _, _ in indexed):
            return None
        for entry_id, _, _, old_parent in indexed:
            self.kept.add(entry_id)
            # a piece of a leaf of several pieces names its leaf; the leaf's own entry (or its one
            # piece) names the tree parent
            if old_parent != node_id and old_parent != parent:
                self.moves.append((entry_id, parent or ""))
        parsed = self.nodes.parsed.get(node_id)  # in hand: its row may hold only (id, kind)
        return pieces, parsed.text if parsed is not None else row[5]


__all__ = ["LazyNodes", "LeafReuse"]
