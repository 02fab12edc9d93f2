"""The main job, end to end.

    build(): ingest → chunk → build → store
    ask():   load → navigate → answer

`KnowTree` owns a store and, lazily, a model: listing or showing trees never loads the model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowtree.build.builder import Progress, build_tree
from knowtree.build.taxonomy import DEFAULT_TAXONOMY
from knowtree.config import Settings
from knowtree.errors import InputError, NotFoundError
from knowtree.ingest import load_documents
from knowtree.llm.base import Model
from knowtree.llm.client import ClientOptions, LLMClient
from knowtree.navigate.walk import EventSink, Walker, WalkOptions
from knowtree.store import SQLiteStore
from knowtree.types import Answer, Document, Node, TreeInfo, Usage

if TYPE_CHECKING:
    from knowtree.kb import KB
    from knowtree.memory import Memory


@dataclass
class BuildReport:
    tree: str
    root_id: str
    documents: int
    nodes: int
    leaves: int
    depth: int
    fallbacks: int
    usage: Usage
    seconds: float
    run_id: str

    def line(self) -> str:
        u = self.usage
        return (
            f"built tree {self.tree!r}: {self.documents} document(s), {self.nodes} nodes "
            f"({self.leaves} leaves, depth {self.depth}) in {self.seconds:.1f}s; "
            f"{u.input_tokens:,} input + {u.output_tokens:,} output tokens, "
            f"{u.cached} answered from cache, {u.calls} LLM calls"
        )


class KnowTree:
    """A knowtree database: `kt = knowtree.open("kb.db")`, then `kt.build(...)`, `kt.tree(name).ask(...)`."""

    def __init__(
        self,
        db: str | Path | None = None,
        *,
        settings: Settings | None = None,
        model: Model | str | None = None,
        create: bool = True,
        **overrides: Any,
    ) -> None:
        if isinstance(model, str):
            overrides["model"] = model
            model = None
        if settings is None:
            settings = Settings.load({"db": str(db) if db is not None else None, **overrides})
        else:
            settings = settings.with_overrides(db=str(db) if db is not None else None, **overrides)
        self.settings = settings
        if not create and settings.db != ":memory:" and not Path(settings.db).exists():
            raise NotFoundError(
                f"no knowtree database at {settings.db}: build a tree first (knowtree build PATH)"
            )
        self.store = SQLiteStore(settings.db)
        self._model: Model | None = model

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def model(self) -> Model:
        if self._model is None:
            from knowtree.llm.registry import resolve_model

            self._model = resolve_model(self.settings)
        return self._model

    def client(self, run_id: str | None = None) -> LLMClient:
        options = ClientOptions(
            max_retries=self.settings.max_retries,
            repair_attempts=self.settings.repair_attempts,
            concurrency=self.settings.concurrency,
        )
        return LLMClient(self.model, self.store, options, run_id=run_id)

    def close(self) -> None:
        if self._model is not None:
            self._model.close()
        self.store.close()

    def __enter__(self) -> KnowTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- build ---------------------------------------------------------------------------------
    def build(
        self,
        paths: Sequence[str] | str,
        *,
        tree: str = "default",
        progress: Progress | None = None,
        on_client: Callable[[LLMClient], None] | None = None,
        add: bool = False,
        meta: dict[str, str] | None = None,
    ) -> BuildReport:
        """Build (or rebuild) the tree `tree` from files, directories or globs.

        Every input is read and checked first: a bad file raises `InputError` before anything is
        stored. Unchanged content costs no model call (the cache answers), so rebuilding after an
        edit only pays for what changed and its ancestors.
        """
        paths = [paths] if isinstance(paths, str) else list(paths)
        if not paths:
            raise InputError("(no input)", "give at least one file, directory or glob")
        from knowtree.ingest.sources import has_structured_input

        headings = self.settings.structure == "headings"
        if headings or add or meta or has_structured_input(paths):  # PDF, DOCX, HTML: by their structure
            from knowtree.ingest.sources import load_sources

            sources = load_sources(paths, headings=headings)  # every file checked before anything is stored
            return self.build_sources(
                sources, tree=tree, add=add, meta=meta, progress=progress, on_client=on_client
            )
        return self.build_documents(load_documents(paths), tree=tree, progress=progress, on_client=on_client)

    def build_sources(
        self,
        sources: Sequence[Any],
        *,
        tree: str = "default",
        add: bool = False,
        meta: dict[str, str] | None = None,
        progress: Progress | None = None,
        on_client: Callable[[LLMClient], None] | None = None,
    ) -> BuildReport:
        """Build a tree that follows the documents' own structure (`ingest.structure.StructuredDocument`s);
        `add` keeps the documents already in the tree (a collection grows), `meta` is user metadata."""
        from knowtree.build.documents import build_sources

        if meta:
            for sd in sources:
                sd.meta = {**sd.meta, **meta}
        return build_sources(self, sources, tree=tree, add=add, progress=progress, on_client=on_client)

    def remove_document(self, tree: str, path: str) -> None:
        """Remove one document and its nodes from a tree (`knowtree rm TREE --doc PATH`)."""
        from knowtree.build.documents import remove_document
        from knowtree.store.docinfo import doc_infos

        if doc_infos(self.store, tree):
            remove_document(self, tree, path)
            return
        # a chunk-based tree: rebuilt from the other stored documents (unchanged calls are cached)
        docs = self.store.documents(tree)
        rest = [d for d in docs if d.path != path and not d.path.endswith(f"/{path}")]
        if len(rest) == len(docs):
            known = ", ".join(d.path for d in docs) or "none"
            raise NotFoundError(f"no document {path!r} in tree {tree!r} (documents: {known})")
        if not rest:
            self.delete(tree)
            return
        self.build_documents(rest, tree=tree)

    def build_documents(
        self,
        documents: Sequence[Document],
        *,
        tree: str = "default",
        progress: Progress | None = None,
        on_client: Callable[[LLMClient], None] | None = None,
    ) -> BuildReport:
        """Build (or rebuild) the tree `tree` from documents already in memory (see `build`)."""
        started = time.monotonic()
        if not documents:
            raise InputError("(no input)", "no documents to build from")
        model = self.model  # resolve (and fail on a bad model string) before a run is recorded
        run_id = self.store.start_run("build", tree, detail=" ".join(d.path for d in documents)[:500])
        client = self.client(run_id)
        if on_client:
            on_client(client)
        s = self.settings
        try:
            result = build_tree(
                documents,
                client,
                taxonomy=s.taxonomy or DEFAULT_TAXONOMY,
                chunk_size=s.chunk_size,
                overlap=s.chunk_overlap,
                max_children=s.max_children,
                progress=progress,
            )
            self.store.save_tree(
                tree,
                root_id=result.root_id,
                nodes=result.nodes,
                documents=documents,
                model=model.id,
                settings=s.model_dump(include={"chunk_size", "chunk_overlap", "max_children", "taxonomy"}),
            )
        except BaseException:
            self.store.finish_run(run_id, "failed")
            raise
        self.store.finish_run(run_id, "ok")
        return BuildReport(
            tree=tree,
            root_id=result.root_id,
            documents=len(documents),
            nodes=len(result.nodes),
            leaves=result.leaves,
            depth=result.depth,
            fallbacks=result.fallbacks,
            usage=client.usage.model_copy(),
            seconds=time.monotonic() - started,
            run_id=run_id,
        )

    # -- read ----------------------------------------------------------------------------------
    def trees(self) -> list[TreeInfo]:
        return [self.store.tree_info(n) for n in self.store.tree_names()]

    def tree(self, name: str) -> Tree:
        return Tree(self, name)

    def memory(self, name: str) -> Memory:
        """A conversation memory (created on its first `add`): `kt.memory("chat").add(messages)`."""
        from knowtree.memory import Memory

        return Memory(self, name)

    def kb(self, name: str, *, embedder: str | None = None) -> KB:
        """A knowledge base (AutoKB): `kt.kb("tv").build(issues=..., docs=..., attributes=..., rules=...)`."""
        from knowtree.kb import KB

        return KB(self, name, embedder=embedder)

    def delete(self, name: str) -> None:
        self.store.delete_tree(name)
        from knowtree.store.docinfo import delete_doc_infos

        delete_doc_infos(self.store, name)


class Tree:
    """One named tree in a database."""

    def __init__(self, kt: KnowTree, name: str) -> None:
        self.kt = kt
        self.name = name
        self.info: TreeInfo = kt.store.tree_info(name)
        self._nodes: dict[str, Node] | None = None

    @property
    def nodes(self) -> dict[str, Node]:
        if self._nodes is None:
            self._nodes = self.kt.store.load_nodes(self.name)
        return self._nodes

    @property
    def root(self) -> Node:
        assert self.info.root_id is not None
        return self.nodes[self.info.root_id]

    def node(self, node_id: str) -> Node:
        matches = [n for i, n in self.nodes.items() if i.startswith(node_id)]
        if len(matches) != 1:
            why = "no node" if not matches else f"{len(matches)} nodes"
            raise NotFoundError(f"{why} with id {node_id!r} in tree {self.name!r}")
        return matches[0]

    def ask(
        self,
        question: str,
        *,
        on_step: EventSink | None = None,
        max_branch_attempts: int | None = None,
        leaves_per_branch: int | None = None,
        mode: str | None = None,
        strategy: str | None = None,
        budget_tokens: int | None = None,
    ) -> Answer:
        """`mode`: walk | search | auto (default: the `ask_mode` setting); `strategy`: how a collection
        picks documents (auto | describe | metadata | semantic); `budget_tokens`: text tree search reads."""
        if self.info.kind == "conversation":  # a memory: answered by its own navigator
            return self.kt.memory(self.name).ask(question, on_step=on_step)
        from knowtree.navigate.modes import ask_structured, check_choice, is_structured

        check_choice(mode, strategy)
        if is_structured(self.nodes, self.root.id) or (mode or self.kt.settings.ask_mode) == "search":
            return ask_structured(
                self,
                question,
                mode=mode or self.kt.settings.ask_mode,
                strategy=strategy,
                budget_tokens=budget_tokens,
                on_step=on_step,
                walk_options=(
                    WalkOptions(
                        max_branch_attempts=max_branch_attempts or self.kt.settings.max_branch_attempts,
                        leaves_per_branch=leaves_per_branch or self.kt.settings.leaves_per_branch,
                        leaf_chars=max(6000, max((len(n.text) for n in self.nodes.values() if n.is_leaf), default=0)),
                    )
                    if max_branch_attempts or leaves_per_branch
                    else None
                ),
            )
        s = self.kt.settings
        options = WalkOptions(
            max_branch_attempts=max_branch_attempts or s.max_branch_attempts,
            leaves_per_branch=leaves_per_branch or s.leaves_per_branch,
            # show whole leaves: as long as the longest one in this tree (chunk size + overlap)
            leaf_chars=max(6000, max((len(n.text) for n in self.nodes.values() if n.is_leaf), default=0)),
        )
        self.kt.model  # noqa: B018 - resolve (and fail on a bad model string) before a run is recorded
        run_id = self.kt.store.start_run("ask", self.name, detail=question[:500])
        walker = Walker(self.nodes, self.root.id, self.kt.client(run_id), options, on_step=on_step)
        try:
            answer = walker.ask(question)
        except BaseException:
            self.kt.store.finish_run(run_id, "failed")
            raise
        self.kt.store.finish_run(run_id, answer.status)
        return answer


def open(db: str | Path = "knowtree.db", **kwargs: Any) -> KnowTree:
    """Open (or create) a knowtree database."""
    return KnowTree(db, **kwargs)
