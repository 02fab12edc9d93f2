"""The main job, end to end.

    build(): ingest → chunk → build → store
    ask():   load → navigate → answer

`KnowTree` owns a store and, lazily, a model: listing or showing trees never loads the model.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowtree.config import Settings
from knowtree.construct.builder import Progress, build_tree
from knowtree.construct.documents import RemoveReport
from knowtree.construct.estimate import Confirm, check_estimate
from knowtree.construct.taxonomy import DEFAULT_TAXONOMY
from knowtree.errors import ConfigError, InputError, NotFoundError, UserError
from knowtree.ingest import load_documents
from knowtree.llm.base import Model
from knowtree.llm.client import ClientOptions, LLMClient
from knowtree.store import SQLiteStore
from knowtree.types import Document, TreeInfo, Usage

if TYPE_CHECKING:
    from knowtree.kb import KB
    from knowtree.memory import Memory
    from knowtree.tree import Tree


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
    priced: bool = False  # the model has prices configured: the cost in USD is known
    skipped: list[str] = field(default_factory=list)  # "path: reason" of each file --skip-bad left out

    def line(self) -> str:
        u = self.usage
        cost = f" (${u.cost_usd:.4f})" if self.priced or u.cost_usd else ""  # $ when prices are set
        skipped = f"; skipped {len(self.skipped)} bad file(s)" if self.skipped else ""
        return (
            f"built tree {self.tree!r}: {self.documents} document(s), {self.nodes} nodes "
            f"({self.leaves} leaves, depth {self.depth}) in {self.seconds:.1f}s; "
            f"{u.input_tokens:,} input + {u.output_tokens:,} output tokens{cost}, "
            f"{u.cached} answered from cache, {u.calls} LLM calls{skipped}"
        )


@dataclass
class Run:
    """One recorded job (`KnowTree.run`): its id, the client charging calls to it, its final status."""

    id: str
    client: LLMClient | None
    status: str = "ok"


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
                f"no knowtree database at {settings.db}: build a tree first (KnowTree.build)"
            )
        self.store = SQLiteStore(settings.db, busy_timeout=settings.busy_timeout)
        self._model: Model | None = model
        self._model_given = model is not None  # a Model object, not a model string from the settings

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def model(self) -> Model:
        if self._model is None:
            from knowtree.llm.registry import resolve_model

            self._model = resolve_model(self.settings)
        return self._model

    def model_spec(self) -> dict[str, str]:
        """What a tree records to be worked on later with the same model: the model string it was
        built from (nothing when the caller passed a Model object)."""
        return {} if self._model_given else {"model_spec": self.settings.model}

    def client(self, run_id: str | None = None) -> LLMClient:
        options = ClientOptions(
            max_retries=self.settings.max_retries,
            repair_attempts=self.settings.repair_attempts,
            concurrency=self.settings.concurrency,
            max_calls=self.settings.max_calls,
            max_tokens=self.settings.max_tokens,
            max_cost=self.settings.max_cost,
        )
        return LLMClient(self.model, self.store, options, run_id=run_id)

    @contextmanager
    def run(self, kind: str, label: str | None, detail: str = "", *, model: bool = True) -> Iterator[Run]:
        """The bookkeeping around one job, in one place: the model is resolved first (a bad model
        string fails before anything is recorded), a run row is opened, `run.client` charges every
        call to it, and the row is closed with `run.status` ("ok" unless the job set another), or
        "failed" when the job raised (KeyboardInterrupt included)."""
        if model:
            self.model  # noqa: B018 - resolve (and fail on a bad model string) before a run is recorded
        run_id = self.store.start_run(kind, label, detail=detail[:500])
        handle = Run(run_id, self.client(run_id) if model else None)
        try:
            yield handle
        except BaseException:
            self.store.finish_run(run_id, "failed")
            raise
        self.store.finish_run(run_id, handle.status)

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
        rename: Callable[[str], str] | None = None,
        replace: bool = False,
        confirm: Confirm | None = None,
        skip_bad: bool = False,
    ) -> BuildReport:
        """Build (or rebuild) the tree `tree` from files, directories or globs.

        Every input is read and checked first: bad files raise `InputError` (several: `BadFilesError`
        naming each) before anything is stored; with `skip_bad` the rest is built and the report's
        `skipped` lists each bad file and why. Unchanged content costs no model call (the cache
        answers), so rebuilding after an edit only pays for what changed and its ancestors. `add`
        keeps the documents already in the tree; without it, a tree holding other documents (or a
        conversation memory) is refused unless `replace`. `confirm` is asked when the estimate passes
        `confirm_calls`. `rename` maps each file's path to the name the tree (and its citations) will
        use (the server names uploads by their file names).
        """
        from knowtree.ingest.problems import Skipped

        skipped: list[Skipped] = []
        report = self._build_paths(
            paths, tree, progress, on_client, add, meta, skip_bad, skipped, rename=rename, replace=replace, confirm=confirm
        )
        report.skipped = [s.line() for s in skipped]
        return report

    def _build_paths(
        self,
        paths: Sequence[str] | str,
        tree: str,
        progress: Progress | None,
        on_client: Callable[[LLMClient], None] | None,
        add: bool,
        meta: dict[str, str] | None,
        skip_bad: bool,
        skipped: list[Any],
        *,
        rename: Callable[[str], str] | None,
        replace: bool,
        confirm: Confirm | None,
    ) -> BuildReport:
        paths = [paths] if isinstance(paths, str) else list(paths)
        if not paths:
            raise InputError("(no input)", "give at least one file, directory or glob")
        from knowtree.construct.guards import check_target
        from knowtree.ingest.sources import has_structured_input

        s = self.settings
        max_bytes = int(s.max_input_mb * 1_000_000)
        headings = s.structure == "headings"
        chunk_tree = self._is_chunk_tree(tree)
        if headings or meta or has_structured_input(paths) or (add and not chunk_tree):
            from knowtree.ingest.sources import load_sources
            from knowtree.ingest.structure import StructuredDocument

            # every file checked before anything is stored
            sources = load_sources(
                paths, headings=headings, max_bytes=max_bytes, skip_bad=skip_bad, skipped=skipped
            )
            if rename is not None:
                for sd in sources:
                    sd.document = sd.document.model_copy(update={"path": rename(sd.document.path)})
            check_target(self.store, tree, kind="document", paths=[d.path for d in sources], add=add, replace=replace)
            if add and chunk_tree:  # a chunk tree grows into a collection: its documents stay
                for sd in sources:  # the metadata given is for the new documents only
                    sd.meta = {**sd.meta, **(meta or {})}
                meta = None
                new = {os.path.normpath(sd.path) for sd in sources}
                kept = [
                    StructuredDocument(document=d, sections=[], source="chunks")
                    for d in self.store.documents(tree)
                    if os.path.normpath(d.path) not in new
                ]
                sources, add = [*kept, *sources], False
            check_estimate(self, tree, sources, confirm, structured=True)
            return self.build_sources(
                sources, tree=tree, add=add, meta=meta, progress=progress, on_client=on_client, replace=True
            )
        documents = load_documents(paths, max_bytes=max_bytes, skip_bad=skip_bad, skipped=skipped)
        if rename is not None:
            documents = [d.model_copy(update={"path": rename(d.path)}) for d in documents]
        check_target(self.store, tree, kind="document", paths=[d.path for d in documents], add=add, replace=replace)
        if add and chunk_tree:  # the documents already in the tree stay (a new version replaces its old one)
            new = {os.path.normpath(d.path) for d in documents}
            documents = [d for d in self.store.documents(tree) if os.path.normpath(d.path) not in new] + documents
        check_estimate(self, tree, documents, confirm)
        return self.build_documents(documents, tree=tree, progress=progress, on_client=on_client, replace=True)

    def _is_chunk_tree(self, tree: str) -> bool:
        """An existing document tree built in chunks (no per-document records, unlike a collection)."""
        from knowtree.store.docinfo import doc_infos

        return (
            self.store.tree_exists(tree)
            and self.store.tree_info(tree).kind == "document"
            and not doc_infos(self.store, tree)
        )

    def build_sources(
        self,
        sources: Sequence[Any],
        *,
        tree: str = "default",
        add: bool = False,
        meta: dict[str, str] | None = None,
        progress: Progress | None = None,
        on_client: Callable[[LLMClient], None] | None = None,
        replace: bool = False,
    ) -> BuildReport:
        """Build a tree that follows the documents' own structure (`ingest.structure.StructuredDocument`s);
        `add` keeps the documents already in the tree (a collection grows), `meta` is user metadata.
        A tree of another kind under that name is refused unless `replace`."""
        from knowtree.construct.documents import build_sources
        from knowtree.construct.guards import check_target

        check_target(self.store, tree, kind="document", paths=[sd.path for sd in sources], add=True, replace=replace)
        if meta:
            for sd in sources:
                sd.meta = {**sd.meta, **meta}
        return build_sources(self, sources, tree=tree, add=add, progress=progress, on_client=on_client)

    def remove_document(self, tree: str, path: str, *, model: str | None = None) -> RemoveReport:
        """Remove one document and its nodes from a tree (`knowtree rm TREE --doc PATH`).

        `path` must name exactly one stored document (its stored path, or a unique suffix of it).
        A tree built in chunks is rebuilt from its other documents with the model it was built with
        (or `model`); unchanged calls come from the cache."""
        from knowtree.construct.documents import remove_document
        from knowtree.construct.guards import match_document
        from knowtree.store.docinfo import doc_infos

        info = self.store.tree_info(tree)
        if info.kind != "document":
            raise UserError(f"tree {tree!r} is a {info.kind} tree: --doc removes documents from document trees")
        infos = doc_infos(self.store, tree)
        docs = self.store.documents(tree)
        target = match_document([i.path for i in infos] if infos else [d.path for d in docs], path, tree)
        left = len(infos or docs) - 1
        if not left:
            self.delete(tree)
            return RemoveReport(tree, target, 0, info.model, info.model, Usage())
        self._use_tree_model(tree, model, required=not infos)
        if infos:
            usage = remove_document(self, tree, target)
            return RemoveReport(tree, target, left, info.model, info.model, usage)
        report = self.build_documents([d for d in docs if d.path != target], tree=tree, replace=True)
        return RemoveReport(tree, target, left, info.model, self.store.tree_info(tree).model, report.usage)

    def _use_tree_model(self, tree: str, model: str | None, *, required: bool) -> None:
        """Work on an existing tree with the model it was built with, unless `model` (or a Model
        object given to KnowTree) says otherwise: never the default model by accident."""
        if model is None and self._model_given:
            return
        from knowtree.llm.registry import spec_for_id

        spec = model or str(self.store.tree_settings(tree).get("model_spec") or "") or spec_for_id(
            self.store.tree_info(tree).model
        )
        if not spec:
            if required:
                raise ConfigError(
                    f"tree {tree!r} was built with {self.store.tree_info(tree).model!r}, which cannot be "
                    "loaded by name: pass --model"
                )
            return
        if spec != self.settings.model or self._model is None:
            if self._model is not None:
                self._model.close()
            self.settings = self.settings.with_overrides(model=spec)
            self._model = None

    def build_documents(
        self,
        documents: Sequence[Document],
        *,
        tree: str = "default",
        progress: Progress | None = None,
        on_client: Callable[[LLMClient], None] | None = None,
        replace: bool = False,
    ) -> BuildReport:
        """Build (or rebuild) the tree `tree` from documents already in memory (see `build`); a tree
        of another kind under that name (a conversation memory) is refused unless `replace`."""
        from knowtree.construct.guards import check_target

        started = time.monotonic()
        if not documents:
            raise InputError("(no input)", "no documents to build from")
        check_target(self.store, tree, kind="document", paths=[d.path for d in documents], add=True, replace=replace)
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
                summarize=s.summaries != "none",  # --summaries none: the zero-call tree
            )
            self.store.save_tree(
                tree,
                root_id=result.root_id,
                nodes=result.nodes,
                documents=documents,
                model=model.id,
                settings={
                    **s.model_dump(include={"chunk_size", "chunk_overlap", "max_children", "taxonomy", "summaries"}),
                    **self.model_spec(),
                },
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
            priced=bool(model.input_cost_per_mtok or model.output_cost_per_mtok),
            usage=client.usage.model_copy(),
            seconds=time.monotonic() - started,
            run_id=run_id,
        )

    # -- read ----------------------------------------------------------------------------------
    def trees(self) -> list[TreeInfo]:
        return [self.store.tree_info(n) for n in self.store.tree_names()]

    def tree(self, name: str) -> Tree:
        from knowtree.tree import Tree

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


def open(db: str | Path = "knowtree.db", **kwargs: Any) -> KnowTree:
    """Open (or create) a knowtree database."""
    return KnowTree(db, **kwargs)
