"""Keeping a store's tree indexes: synced in the transaction of every save (`attach`), and read once
and kept between questions (`IndexCache`)."""

from __future__ import annotations

import threading

from knowtree.retrieve import treeindex
from knowtree.retrieve.treeindex import IndexStore, TreeIndex, drop_entries
from knowtree.store.protocol import Store


def attach(store: Store) -> None:
    """Keep the tree index with the trees of `store`: synced in every save's transaction, dropped
    with the tree. (`KnowTree` attaches it; a store without it is synced on first search.)"""
    # looked up at call time, so a wrapped sync_entries (benchmarks/bench_tree_index.py) is the one run
    store.on_save_tree(lambda conn, tree, nodes: treeindex.sync_entries(conn, tree, nodes))
    store.on_delete_tree(lambda conn, tree: drop_entries(conn, tree))


class IndexCache:
    """The indexes of one store's trees, kept between questions: reading an index's rows and vectors
    and the tree's shape from them was most of a search on a large tree (a `Tree.retrieve` of 1,000
    reports: 0.41 s a question, 0.09 s with the index kept; benchmarks/RESULTS.md, "Answering from a
    large tree"). An index whose tree changed since it was read (`TreeIndex.current`) is replaced by
    a fresh one (a search holding the old object finishes on what it read); beyond `size` trees the
    least recently used is dropped."""

    def __init__(self, store: IndexStore, size: int = 8) -> None:
        self.store = store
        self.size = size
        self._items: dict[str, TreeIndex] = {}
        self._lock = threading.Lock()

    def get(self, tree: str) -> TreeIndex:
        with self._lock:
            index = self._items.pop(tree, None)
        if index is None or not index.current():
            index = TreeIndex(self.store, tree)
        with self._lock:
            self._items.pop(tree, None)
            self._items[tree] = index  # the most recently used last
            while len(self._items) > self.size:
                self._items.pop(next(iter(self._items)))
        return index

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
