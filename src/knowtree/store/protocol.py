"""The store interface: what the rest of knowtree uses of a store, so a second backend is a file.

Two levels:

- `Store`: trees and their nodes and documents, conversation memories (incremental steps and
  verbatim messages), the LLM cache and call ledger, and runs. `SQLiteStore` implements it, and so
  does the dict-based fake `InMemoryStore` (`knowtree.store.inmemory`), for unit tests.
- `SQLStore`: a `Store` that also runs SQL, for modules that own tables of their own (document
  infos and expert notes in `store/docinfo.py`, knowledge bases in `store/kb.py`, the server's
  tenants and jobs, the tree index in `retrieve/treeindex.py`). Only `SQLiteStore` implements it.

Every table is created by `store/migrations.py`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar, runtime_checkable

from knowtree.llm.base import Completion
from knowtree.types import Document, Node, NodeMeta, TreeInfo, Usage

T = TypeVar("T")
#: fn(handle, tree name), run inside a tree's delete (a sqlite3.Connection for SQLiteStore)
TreeHook = Callable[[Any, str], object]
#: fn(handle, tree name, the nodes just saved), run inside a tree's save: what was saved is handed
#: over, so a hook (the tree index) need not read it back. A `TreeHook` is accepted too (`save_hook`).
SaveHook = Callable[[Any, str, Sequence[Node]], object]


def save_hook(fn: SaveHook | TreeHook) -> SaveHook:
    """`fn` as a `SaveHook`: a hook of two parameters (handle, tree name) is called without the nodes."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): call it as a SaveHook
        return fn  # type: ignore[return-value]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in params):
        return fn  # type: ignore[return-value]
    two: TreeHook = fn  # type: ignore[assignment]
    return lambda handle, name, _nodes: two(handle, name)


@runtime_checkable
class Store(Protocol):
    """Trees, memories, the LLM cache and ledger, and runs. Names of trees are unique per store."""

    path: str

    def close(self) -> None: ...

    # -- hooks: work kept with a tree (its index), done in the same transaction ---------------------
    def on_save_tree(self, fn: SaveHook | TreeHook) -> None:
        """Run `fn(handle, name, nodes)` in every `save_tree`, after its rows are written (a
        two-parameter `fn(handle, name)` is called without the nodes)."""
        ...

    def on_delete_tree(self, fn: TreeHook) -> None: ...

    # -- trees -------------------------------------------------------------------------------------
    def save_tree(
        self,
        name: str,
        *,
        root_id: str,
        nodes: Sequence[Node],
        documents: Sequence[Document],
        model: str,
        settings: dict[str, object],
        kind: str = "document",
    ) -> None:
        """Replace the tree `name` with these nodes and documents, atomically."""
        ...

    def delete_tree(self, name: str) -> None:
        """Remove a tree (NotFoundError when there is none)."""
        ...

    def tree_exists(self, name: str) -> bool: ...

    def tree_names(self) -> list[str]: ...

    def tree_info(self, name: str) -> TreeInfo: ...

    def tree_root_kind(self, name: str) -> tuple[str | None, str]:
        """(root id, kind) of a tree, one row read (`tree_info` counts its nodes); NotFoundError
        when there is none."""
        ...

    def missing_message(self, name: str) -> str:
        """The message of the NotFoundError for a missing tree (it names the trees there are)."""
        ...

    def load_nodes(self, name: str, ids: Collection[str] | None = None) -> dict[str, Node]:
        """The tree's nodes by id: all of them, or only those of `ids` that exist."""
        ...

    def root_id(self, name: str) -> str: ...

    def documents(self, name: str) -> list[Document]: ...

    def tree_settings(self, name: str) -> dict[str, object]: ...

    def hold_tree(self, name: str) -> AbstractContextManager[object]:
        """Across transactions: one process at a time works on the tree `name` (a memory's add reads
        its state, then writes it step by step). A no-op where one process owns the store."""
        ...

    def search_nodes(self, name: str, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """Lexical search over node text and metadata: (node id, score), best first."""
        ...

    def update_node_meta(self, name: str, node: Node, meta: NodeMeta) -> None:
        """Replace a stored node's metadata (a summary computed after the build, an enrich step) and
        mark the tree changed: its `TreeInfo.updated` moves on (strictly, even within a second), so
        what is derived from the tree (its index) is brought up to date on its next use."""
        ...

    # -- conversation memories -------------------------------------------------------------------
    def save_memory_step(
        self,
        name: str,
        *,
        root_id: str,
        nodes: Sequence[Node],
        parents: dict[str, str],
        removed: Sequence[str] = (),
        messages: Sequence[dict[str, object]] = (),
        forgotten: Sequence[int] = (),
        model: str,
        settings: dict[str, object],
        kind: str = "conversation",
    ) -> None:
        """Upsert changed nodes and append new messages of a memory, atomically; `forgotten`: positions
        of messages deleted (their rows go, no other position changes)."""
        ...

    def load_messages(self, name: str, start: int = 0, end: int | None = None) -> list[dict[str, object]]: ...

    def stored_add_keys(self, name: str, keys: Collection[str]) -> set[str]:
        """Which of `keys` (add keys given to messages, `ChatMessage.key`) the memory holds already."""
        ...

    # -- LLM cache and ledger (llm.client.CallStore) ---------------------------------------------
    def cache_get(self, key: str) -> Completion | None: ...

    def cache_put(self, key: str, model_id: str, completion: Completion) -> None: ...

    def cache_delete(self, keys: list[str]) -> None: ...

    def record_call(
        self,
        *,
        run_id: str | None,
        key: str,
        model_id: str,
        purpose: str,
        cached: bool,
        usage: Usage,
        error: str | None,
    ) -> None: ...

    def put_reply(
        self, key: str, model_id: str, completion: Completion, *, run_id: str | None, purpose: str, usage: Usage
    ) -> None:
        """A fresh reply: `cache_put` and its (uncached, error-free) `record_call` in one write."""
        ...

    # -- runs ------------------------------------------------------------------------------------
    def start_run(self, kind: str, tree: str | None, detail: str = "", *, space: str = "tree") -> str:
        """Open a run about `tree` (a knowledge base with `space="kb"`); returns its id."""
        ...

    def finish_run(self, run_id: str, status: str) -> None: ...

    def run_usage(self, run_id: str) -> Usage: ...

    def runs(self, tree: str | None = None, limit: int = 20, *, owner: str | None = None) -> list[dict[str, object]]:
        """The latest runs, of the label `tree` and/or of the subjects `owner` owns (store/names.py)."""
        ...


@runtime_checkable
class SQLStore(Store, Protocol):
    """A `Store` that runs SQL on its tables (every one created in `store/migrations.py`)."""

    def query(self, sql: str, args: Sequence[object] = ()) -> list[tuple]:
        """Read rows (one statement, under the store's lock)."""
        ...

    def transaction(self) -> AbstractContextManager[Any]:
        """One write transaction yielding the connection (rolled back on error)."""
        ...

    def read(self, fn: Callable[[Any], T]) -> T:
        """`fn(connection)` under the store's lock, for reads."""
        ...

    def write(self, fn: Callable[[Any], T]) -> T:
        """`fn(connection)` in one write transaction."""
        ...


__all__ = ["SQLStore", "SaveHook", "Store", "TreeHook", "save_hook"]
