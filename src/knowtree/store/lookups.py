"""Small reads other layers make of a store's tables (so their SQL stays in store/): a tree's
version stamp (the server caches a tree's view until it changes), whether a tree index was built."""

from __future__ import annotations

from typing import Any


def tree_version(store: Any, name: str) -> tuple[object, ...] | None:
    """(updated, root id, node count) of the tree `name`, which changes whenever the tree does;
    None when there is no such tree."""
    rows = store.query(
        "SELECT updated, root_id, (SELECT COUNT(*) FROM nodes WHERE tree = ?) FROM trees WHERE name = ?",
        (name, name),
    )
    return tuple(rows[0]) if rows else None


def has_tree_index(store: Any, name: str) -> bool:
    """Whether the tree index of `name` was built (it has a state row)."""
    return bool(store.query("SELECT 1 FROM tree_index_state WHERE tree = ?", (name,)))


__all__ = ["has_tree_index", "tree_version"]
