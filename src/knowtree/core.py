"""The main job, end to end.

    build(): ingest → chunk → build → store
    ask():   load → navigate → answer

`KnowTree` owns a store and, lazily, a model: listing or showing trees never loads the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowtree.config import Settings
from knowtree.construct.report import BuildReport, RemoveReport
from knowtree.errors import ConfigError
from knowtree.host import Run
from knowtree.llm.base import Model
from knowtree.llm.client import LLMClient, cost_cap_problem, options_from
from knowtree.retrieve.indexcache import IndexCache
from knowtree.retrieve.indexcache import attach as attach_tree_index
from knowtree.store import SQLStore, open_store
from knowtree.types import Document, TreeInfo

if TYPE_CHECKING:
    from knowtree.construct.builder import Progress
    from knowtree.construct.estimate import Confirm
    from knowtree.ingest.roots import ReadRoots
    from knowtree.ingest.structure import StructuredDocument
    from knowtree.kb import KB
    from knowtree.memory import Memory
    from knowtree.retrieve.embed import Embedder
    from knowtree.retrieve.treeindex import TreeIndex
    from knowtree.tree import Tree


class KnowTree:
    """A knowtree database: `kt = knowtree.open("kb.db")`, then `kt.build(...)`, `kt.tree(name).ask(...)`."""

    def __init__(
        self,
        db: str | Path | None = None,
        *,
        settings: Settings | None = None,
        model: Model | str | None = None,
        create: bool = True,
        read_env: bool = True,
        **overrides: Any,
    ) -> None:
        """`read_env=False`: settings from the arguments alone (no `KNOWTREE_*` variables, no config
        file), e.g. for a library embedding knowtree or a test."""
        if isinstance(model, str):
            overrides["model"] = model
            model = None
        if settings is None:
            settings = Settings.load({"db": str(db) if db is not None else None, **overrides}, read_env=read_env)
        else:
            settings = settings.with_overrides(db=str(db) if db is not None else None, **overrides)
        self.settings = settings
        # a file must exist unless `create` (a URL's database always does)
        self.store: SQLStore = open_store(settings.db, create=create, busy_timeout=settings.busy_timeout)
        attach_tree_index(self.store)  # a tree's index is saved with it, in the same transaction
        self._indexes = IndexCache(self.store)  # and read once, kept while its tree does not change
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
        return LLMClient(self.model, self.store, options_from(self.settings), run_id=run_id)

    @contextmanager
    def run(
        self, kind: str, label: str | None, detail: str = "", *, model: bool = True, space: str = "tree"
    ) -> Iterator[Run]:
        """The bookkeeping around one job, in one place: the model is resolved first (a bad model
        string fails before anything is recorded), a run row is opened, `run.client` charges every
        call to it, and the row is closed with `run.status` ("ok" unless the job set another), or
        "failed" when the job raised (KeyboardInterrupt included). `label`: the tree the run is
        about (a knowledge base's name with `space="kb"`)."""
        if model:
            # resolve (and fail on a bad model string, or a cost cap it cannot keep) before a run is recorded
            problem = cost_cap_problem(self.model, self.settings.max_cost)
            if problem is not None:
                raise ConfigError(problem)
        run_id = self.store.start_run(kind, label, detail=detail[:500], space=space)
        handle = Run(run_id, self.client(run_id) if model else None)
        try:
            yield handle
        except BaseException:
            self.store.finish_run(run_id, "failed")
            raise
        self.store.finish_run(run_id, handle.status)

    def close(self) -> None:
        self._indexes.clear()
        if self._model is not None:
            self._model.close()
        self.store.close()

    def __enter__(self) -> KnowTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- build (the pipeline is knowtree.building) ---------------------------------------------
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
        within: ReadRoots | None = None,
    ) -> BuildReport:
        """Build (or rebuild) the tree `tree` from files, directories or globs.

        Every input is read and checked first: bad files raise `InputError` (several: `BadFilesError`
        naming each) before anything is stored; with `skip_bad` the rest is built and the report's
        `skipped` lists each bad file and why. Unchanged content costs no model call (the cache
        answers), so rebuilding after an edit only pays for what changed and its ancestors. `add`
        keeps the documents already in the tree; without it, a tree holding other documents (or a
        conversation memory) is refused unless `replace`. `confirm` is asked when the estimate passes
        `confirm_calls`. `rename` maps each file's path to the name the tree (and its citations) will
        use (the server names uploads by their file names). `within` (`knowtree.ingest.roots.ReadRoots`):
        every file read, those found in folders included, must resolve (symbolic links, `..`) under
        one of these roots, or it is a bad file like an unreadable one; without it (the CLI) whatever
        this process can read is read, symbolic links followed.
        """
        from knowtree import building  # the build's modules: not for a question
        return building.build_paths(
            self, paths, tree=tree, progress=progress, on_client=on_client, add=add, meta=meta,
            rename=rename, replace=replace, confirm=confirm, skip_bad=skip_bad, within=within,
        )  # fmt: skip

    def build_sources(
        self,
        sources: Sequence[StructuredDocument],
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
        from knowtree import building  # the build's modules: not for a question
        return building.build_structured(
            self, sources, tree=tree, add=add, meta=meta, progress=progress, on_client=on_client, replace=replace
        )

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
        from knowtree import building  # the build's modules: not for a question
        return building.build_chunked(
            self, documents, tree=tree, progress=progress, on_client=on_client, replace=replace
        )

    def remove_document(self, tree: str, path: str, *, model: str | None = None) -> RemoveReport:
        """Remove one document and its nodes from a tree (`knowtree rm TREE --doc PATH`).

        `path` must name exactly one stored document (its stored path, or a unique suffix of it).
        A tree built in chunks is rebuilt from its other documents with the model it was built with
        (or `model`); unchanged calls come from the cache."""
        from knowtree import building  # the build's modules: not for a question
        return building.remove_document(
            self, tree, path, use_tree_model=lambda required: self._use_tree_model(tree, model, required=required)
        )

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

    # -- read ----------------------------------------------------------------------------------
    def trees(self) -> list[TreeInfo]:
        return [self.store.tree_info(n) for n in self.store.tree_names()]

    def tree(self, name: str) -> Tree:
        """The tree `name` (any kind); `NotFoundError` (naming the trees there) when there is none."""
        from knowtree.tree import Tree

        return Tree(self, name)

    def tree_index(self, name: str) -> TreeIndex:
        """The index of tree `name`, in step with the tree, kept between questions: searches of a tree
        that did not change reuse its rows and vectors (`retrieve.indexcache.IndexCache`)."""
        return self._indexes.get(name)

    def embed_index(self, name: str, embedder: Embedder | str | None = "default") -> int:
        """Embed the entries of tree `name`'s index that have no vector for `embedder` yet, store them
        and keep them with the index, so that the next search does not. A search embeds what is
        missing itself, but only when that takes at most `DENSE_SECONDS` (else it scores its lexical
        candidates densely): the first search of a large tree pays for it (about 17 s for a 6.2 MB
        tree on 2 cores) or searches without whole-index dense scores. The server calls this after
        each build, enrich and background add. Returns the number of entries with a vector now (0
        without the embedding extra, `embedder="default"`)."""
        from knowtree.retrieve.treesearch import resolve_embedder

        resolved = resolve_embedder(embedder)
        if resolved is None:
            return 0
        got = self.tree_index(name).vectors(resolved)  # no time limit: None only with one
        return len(got[0]) if got is not None else 0

    def memory(self, name: str) -> Memory:
        """A conversation memory (created on its first `add`): `kt.memory("chat").add(messages)`.
        `NotFoundError` when `name` is another kind of tree; reading a memory not yet created
        (`messages`, `ask`, `context`) raises `NotFoundError` too."""
        from knowtree.memory import Memory

        return Memory(self, name)

    def kb(self, name: str, *, embedder: str | None = None) -> KB:
        """A knowledge base (AutoKB): `kt.kb("tv").build(issues=..., docs=..., attributes=..., rules=...)`."""
        from knowtree.kb import KB

        return KB(self, name, embedder=embedder)

    def delete(self, name: str) -> None:
        self.store.delete_tree(name)
        from knowtree.retrieve import vecfile
        from knowtree.store.docinfo import delete_doc_infos

        delete_doc_infos(self.store, name)
        if db := vecfile.database_file(self.store):  # the tree's vectors files beside the database
            vecfile.drop(db, name)


def open(db: str | Path = "knowtree.db", **kwargs: Any) -> KnowTree:
    """Open (or create) a knowtree database."""
    return KnowTree(db, **kwargs)
