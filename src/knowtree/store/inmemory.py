"""A dict-based `Store` (see `store/protocol.py`) for unit tests: no SQL, no file, no locks.

    store = InMemoryStore()
    store.save_tree("t", root_id="r", nodes=nodes, documents=[], model="m", settings={})
    store.load_nodes("t")

It behaves like `SQLiteStore` on everything `Store` covers (the same contract tests run against
both, tests/test_store_protocol.py). It is not an `SQLStore`: modules that run SQL on tables of
their own (document infos, knowledge bases, the server, the tree index) need `SQLiteStore`.
Search is a plain word-overlap score, not BM25: the order of results is not comparable.
"""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime

from knowtree.errors import NotFoundError, StoreError
from knowtree.llm.base import Completion
from knowtree.store.names import owner_of
from knowtree.store.protocol import SaveHook, TreeHook, save_hook
from knowtree.store.rows import MESSAGE_KEYS, fts_body, touched
from knowtree.store.runs import run_label
from knowtree.types import Document, Node, NodeKind, NodeMeta, TreeInfo, Usage

_TERM = re.compile(r"[^\W_]+")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class _Tree:
    root_id: str
    model: str
    settings: dict[str, object]
    kind: str
    created: str
    updated: str
    nodes: dict[str, Node] = field(default_factory=dict)
    documents: list[Document] = field(default_factory=list)
    messages: dict[int, dict[str, object]] = field(default_factory=dict)
    add_keys: dict[str, int] = field(default_factory=dict)  # a message's add key -> its position


class InMemoryStore:
    """Trees, memories, the LLM cache and ledger, and runs, held in dicts (lost on close)."""

    def __init__(self, path: str = ":memory:") -> None:
        self.path = path
        self._trees: dict[str, _Tree] = {}
        self._cache: dict[str, Completion] = {}
        self._calls: list[tuple[str | None, bool, Usage]] = []
        self._runs: list[dict[str, object]] = []
        self._on_save: list[SaveHook] = []
        self._on_delete: list[TreeHook] = []

    def close(self) -> None:
        pass

    def hold_tree(self, name: str) -> AbstractContextManager[object]:
        return nullcontext()  # one process holds the dicts

    def on_save_tree(self, fn: SaveHook | TreeHook) -> None:
        self._on_save.append(save_hook(fn))

    def on_delete_tree(self, fn: TreeHook) -> None:
        self._on_delete.append(fn)

    # -- trees -----------------------------------------------------------------------------------
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
        now = _now()
        old = self._trees.get(name)
        tree = _Tree(root_id, model, dict(settings), kind, old.created if old else now, now)
        tree.nodes = {n.id: n.model_copy(deep=True) for n in nodes}
        tree.documents = [d.model_copy() for d in documents]
        self._trees[name] = tree
        try:  # hooks see the new version; if one fails, the previous version is kept
            for fn in self._on_save:
                fn(self, name, list(tree.nodes.values()))
        except BaseException:
            if old is None:
                del self._trees[name]
            else:
                self._trees[name] = old
            raise

    def delete_tree(self, name: str) -> None:
        if name not in self._trees:
            raise NotFoundError(f"no tree named {name!r} in {self.path}")
        for fn in self._on_delete:
            fn(self, name)
        del self._trees[name]

    def tree_exists(self, name: str) -> bool:
        return name in self._trees

    def tree_names(self) -> list[str]:
        return sorted(self._trees)

    def _tree(self, name: str) -> _Tree:
        if name not in self._trees:
            raise NotFoundError(self.missing_message(name))
        return self._trees[name]

    def tree_root_kind(self, name: str) -> tuple[str | None, str]:
        t = self._tree(name)
        return t.root_id, t.kind

    def tree_info(self, name: str) -> TreeInfo:
        t = self._tree(name)
        nodes = t.nodes.values()
        return TreeInfo(
            name=name,
            root_id=t.root_id,
            documents=len(t.documents),
            nodes=len(nodes),
            leaves=sum(n.kind is NodeKind.LEAF for n in nodes),
            depth=max((n.level for n in nodes), default=0),
            created=t.created,
            updated=t.updated,
            model=t.model,
            kind=t.kind,
        )

    def missing_message(self, name: str) -> str:
        known = ", ".join(self.tree_names()) or "none yet: run `knowtree build`"
        return f"no tree named {name!r} in {self.path} (trees: {known})"

    def load_nodes(self, name: str, ids: Collection[str] | None = None) -> dict[str, Node]:
        nodes = self._tree(name).nodes
        keep = nodes if ids is None else [i for i in dict.fromkeys(ids) if i in nodes]
        return {i: nodes[i].model_copy(deep=True) for i in keep}

    def root_id(self, name: str) -> str:
        if name not in self._trees or not self._trees[name].root_id:
            raise NotFoundError(self.missing_message(name))
        return self._trees[name].root_id

    def documents(self, name: str) -> list[Document]:
        t = self._trees.get(name)
        return [d.model_copy() for d in t.documents] if t else []

    def tree_settings(self, name: str) -> dict[str, object]:
        return copy.deepcopy(self._tree(name).settings)

    def search_nodes(self, name: str, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """Nodes sharing words with the query (text and metadata), most shared words first."""
        terms = {t.lower() for t in _TERM.findall(query) if len(t) > 1}
        t = self._trees.get(name)
        if not terms or t is None:
            return []
        hits = []
        for n in t.nodes.values():
            words = {w.lower() for w in _TERM.findall(fts_body(n))}
            if shared := len(terms & words):
                hits.append((n.id, float(shared)))
        return sorted(hits, key=lambda h: -h[1])[:limit]

    def update_node_meta(self, name: str, node: Node, meta: NodeMeta) -> None:
        t = self._tree(name)
        stored = t.nodes.get(node.id)
        if stored is not None:
            stored.meta = meta.model_copy(deep=True)
            t.updated = touched(t.updated)

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
        now = _now()
        t = self._trees.get(name)
        if t is not None and t.kind != kind:
            raise StoreError(f"{name!r} is a {t.kind} tree, not a {kind}: choose another name")
        if t is None:
            t = self._trees[name] = _Tree(root_id, model, {}, kind, now, now)
        if any(int(m["position"]) in t.messages for m in messages):  # type: ignore[call-overload]
            raise StoreError(f"{self.path}: could not update memory {name!r} (a message position is taken)")
        t.root_id, t.model, t.settings, t.updated = root_id, model, dict(settings), now
        for node_id in [*removed, *(n.id for n in nodes)]:
            t.nodes.pop(node_id, None)
        t.nodes.update((n.id, n.model_copy(deep=True)) for n in nodes)
        for m in messages:
            t.messages[int(m["position"])] = {k: m.get(k) for k in MESSAGE_KEYS}  # type: ignore[call-overload]
            if m.get("add_key") is not None:
                t.add_keys[str(m["add_key"])] = int(m["position"])  # type: ignore[call-overload]
        for p in forgotten:
            t.messages.pop(p, None)

    def stored_add_keys(self, name: str, keys: Collection[str]) -> set[str]:
        t = self._trees.get(name)
        return {k for k in keys if t is not None and t.add_keys.get(k) in t.messages}

    def load_messages(self, name: str, start: int = 0, end: int | None = None) -> list[dict[str, object]]:
        t = self._trees.get(name)
        if t is None:
            return []
        stop = end if end is not None else 2**62
        return [dict(t.messages[p]) for p in sorted(t.messages) if start <= p < stop]

    # -- LLM cache and ledger --------------------------------------------------------------------
    def cache_get(self, key: str) -> Completion | None:
        return self._cache.get(key)

    def cache_put(self, key: str, model_id: str, completion: Completion) -> None:
        self._cache[key] = completion

    def cache_delete(self, keys: list[str]) -> None:
        for k in keys:
            self._cache.pop(k, None)

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
    ) -> None:
        self._calls.append((run_id, cached, usage))

    def put_reply(
        self, key: str, model_id: str, completion: Completion, *, run_id: str | None, purpose: str, usage: Usage
    ) -> None:
        self.cache_put(key, model_id, completion)
        self.record_call(run_id=run_id, key=key, model_id=model_id, purpose=purpose, cached=False, usage=usage,
                         error=None)

    # -- runs ------------------------------------------------------------------------------------
    def start_run(self, kind: str, tree: str | None, detail: str = "", *, space: str = "tree") -> str:
        run_id = uuid.uuid4().hex[:12]
        self._runs.append(
            {
                "id": run_id,
                "kind": kind,
                "tree": run_label(space, tree),
                "detail": detail,
                "status": "running",
                "started": _now(),
                "finished": None,
                "space": space,
                "subject": tree,
                "owner": owner_of(tree),
            }
        )
        return run_id

    def finish_run(self, run_id: str, status: str) -> None:
        for run in self._runs:
            if run["id"] == run_id:
                run["status"], run["finished"] = status, _now()

    def run_usage(self, run_id: str) -> Usage:
        mine = [(cached, u) for r, cached, u in self._calls if r == run_id]
        return Usage(
            calls=sum(not c for c, _ in mine),
            cached=sum(c for c, _ in mine),
            input_tokens=sum(u.input_tokens for _, u in mine),
            output_tokens=sum(u.output_tokens for _, u in mine),
            cost_usd=sum(u.cost_usd for _, u in mine),
            seconds=sum(u.seconds for _, u in mine),
        )

    def runs(self, tree: str | None = None, limit: int = 20, *, owner: str | None = None) -> list[dict[str, object]]:
        picked = [
            r for r in self._runs if (not tree or r["tree"] == tree) and (owner is None or r["owner"] == owner)
        ]
        latest = sorted(enumerate(picked), key=lambda ir: (str(ir[1]["started"]), ir[0]), reverse=True)
        return [
            {**{k: v for k, v in r.items() if k != "owner"}, "usage": self.run_usage(str(r["id"])).model_dump()}
            for _, r in latest[:limit]
        ]
