"""The build facade: one pipeline from inputs to a stored tree, behind `KnowTree.build`,
`build_documents`, `build_sources` and `remove_document`.

    read + check inputs (ingest) → guards → estimate/confirm → KnowTree.run():
        construct (build_tree | build_sources) → store the result → BuildReport

`construct/` gets documents, a client and callbacks and returns what it built; everything that
touches the store (what the tree holds now, the guards' view of it, the writes) and the run
bookkeeping happen here, once, for plain text and structured (PDF, DOCX, HTML, headings) builds alike.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from knowtree.config import Settings
from knowtree.construct.builder import BuildResult, Progress, build_tree
from knowtree.construct.documents import (
    SETTINGS_KEPT,
    SourcesResult,
    build_sources,
    finish_removal,
    plan_removal,
)
from knowtree.construct.estimate import (
    Confirm,
    confirm_estimate,
    eager_paths,
    estimate_build,
    estimate_sources,
)
from knowtree.construct.guards import StoredTree, check_stored, match_document
from knowtree.construct.report import BuildReport, RemoveReport
from knowtree.construct.structure import StructureOptions
from knowtree.construct.taxonomy import DEFAULT_TAXONOMY
from knowtree.errors import InputError, UserError
from knowtree.ingest import load_documents
from knowtree.ingest.problems import Mapper, Skipped
from knowtree.ingest.roots import ReadRoots
from knowtree.ingest.sources import has_structured_input, load_sources
from knowtree.ingest.structure import StructuredDocument
from knowtree.llm.base import Model
from knowtree.llm.client import LLMClient
from knowtree.store import SQLStore
from knowtree.store.docinfo import doc_infos, save_doc_infos
from knowtree.types import Document, Usage

if TYPE_CHECKING:
    from knowtree.retrieve.treeindex import TreeIndex


class Host(Protocol):
    """What the build needs of a `KnowTree`."""

    settings: Settings
    store: SQLStore

    @property
    def model(self) -> Model: ...

    def model_spec(self) -> dict[str, str]: ...

    def run(
        self, kind: str, label: str | None, detail: str = "", *, model: bool = True, space: str = "tree"
    ) -> AbstractContextManager[Any]: ...

    def delete(self, name: str) -> None: ...

    def tree_index(self, name: str) -> TreeIndex: ...


# -- the guards' view of the store ---------------------------------------------------------
def check_target(
    store: SQLStore,
    tree: str,
    *,
    kind: str,
    paths: Sequence[str] | None = None,
    add: bool = False,
    replace: bool = False,
    action: str = "building",
) -> None:
    """`construct.guards.check_stored` on what `store` holds under `tree` (read only as far as the
    guard needs it: the documents when they are compared, the messages when a memory is named)."""
    if replace or not store.tree_exists(tree):
        return
    info = store.tree_info(tree)
    if info.kind != kind or paths is None:
        holds = (
            f"a conversation memory with {len(store.load_messages(tree))} message(s)"
            if info.kind == "conversation"
            else f"a {info.kind} tree with {info.documents} document(s)"
        )
        stored = StoredTree(info.kind, holds, [])
    else:
        stored = StoredTree(info.kind, "", [] if add else [d.path for d in store.documents(tree)])
    check_stored(stored, tree, kind=kind, paths=paths, add=add, replace=replace, action=action)


def is_chunk_tree(store: SQLStore, tree: str) -> bool:
    """An existing document tree built in chunks (no per-document records, unlike a collection)."""
    return store.tree_exists(tree) and store.tree_info(tree).kind == "document" and not doc_infos(store, tree)


def check_estimate(
    kt: Host, tree: str, documents: Sequence[Any], confirm: Confirm | None, *, structured: bool = False
) -> None:
    """Estimate a build of `documents` (StructuredDocuments when `structured`) into `tree` and ask
    `confirm` when it passes `confirm_calls`; documents the tree holds unchanged are left out."""
    if confirm is None:
        return
    s, store = kt.settings, kt.store
    exists = store.tree_exists(tree)
    unchanged = frozenset((d.path, d.sha256) for d in store.documents(tree)) if exists else frozenset()
    if structured:
        summaries = s.summaries
        if summaries == "auto" and exists:
            summaries = str(store.tree_settings(tree).get("summaries", "auto"))
        estimate = estimate_sources(documents, s, summaries=summaries, unchanged=unchanged)
    else:
        estimate = estimate_build(
            [(d.path, d.sha256, len(d.text)) for d in documents],
            s,
            unchanged=unchanged,
            input_cost_per_mtok=s.input_cost_per_mtok,
            output_cost_per_mtok=s.output_cost_per_mtok,
        )
    confirm_estimate(estimate, s, confirm)


# -- from paths ----------------------------------------------------------------------------
def build_paths(
    kt: Host,
    paths: Sequence[str] | str,
    *,
    tree: str,
    progress: Progress | None,
    on_client: Callable[[LLMClient], None] | None,
    add: bool,
    meta: dict[str, str] | None,
    rename: Callable[[str], str] | None,
    replace: bool,
    confirm: Confirm | None,
    skip_bad: bool,
    within: ReadRoots | None = None,
) -> BuildReport:
    """`KnowTree.build`: read and check every input, then build it the structured way (PDF, DOCX,
    HTML, headings, metadata, a collection grown with --add) or in chunks. `within`: only files that
    resolve under these roots are read (`knowtree.ingest.roots`)."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    if not paths:
        raise InputError("(no input)", "give at least one file, directory or glob")
    cluster = None
    if kt.settings.executor == "ray":  # the files read by Ray tasks, then the model calls
        from knowtree.distributed import Cluster

        cluster = Cluster.join(kt.settings.ray_address)
    try:
        return _build_paths(
            kt, paths, tree=tree, progress=progress, on_client=on_client, add=add, meta=meta, rename=rename,
            replace=replace, confirm=confirm, skip_bad=skip_bad, within=within,
            mapper=cluster.mapper if cluster is not None else None,
        )
    finally:
        if cluster is not None:
            cluster.leave()


def _build_paths(
    kt: Host,
    paths: list[str],
    *,
    tree: str,
    progress: Progress | None,
    on_client: Callable[[LLMClient], None] | None,
    add: bool,
    meta: dict[str, str] | None,
    rename: Callable[[str], str] | None,
    replace: bool,
    confirm: Confirm | None,
    skip_bad: bool,
    within: ReadRoots | None,
    mapper: Mapper | None,
) -> BuildReport:
    skipped: list[Skipped] = []
    s = kt.settings
    max_bytes = int(s.max_input_mb * 1_000_000)
    headings = s.structure == "headings"
    chunk_tree = is_chunk_tree(kt.store, tree)
    if headings or meta or has_structured_input(paths, within) or (add and not chunk_tree):
        # every file checked before anything is stored
        sources = load_sources(
            paths, headings=headings, max_bytes=max_bytes, skip_bad=skip_bad, skipped=skipped, within=within,
            mapper=mapper,
        )
        if rename is not None:
            for sd in sources:
                sd.document = sd.document.model_copy(update={"path": rename(sd.document.path)})
        check_target(
            kt.store, tree, kind="document", paths=[d.path for d in sources], add=add, replace=replace
        )
        if add and chunk_tree:  # a chunk tree grows into a collection: its documents stay
            for sd in sources:  # the metadata given is for the new documents only
                sd.meta = {**sd.meta, **(meta or {})}
            meta = None
            new = {os.path.normpath(sd.path) for sd in sources}
            kept = [
                StructuredDocument(document=d, sections=[], source="chunks")
                for d in kt.store.documents(tree)
                if os.path.normpath(d.path) not in new
            ]
            sources, add = [*kept, *sources], False
        check_estimate(kt, tree, sources, confirm, structured=True)
        report = build_structured(
            kt, sources, tree=tree, add=add, meta=meta, progress=progress, on_client=on_client, replace=True
        )
    else:
        documents = load_documents(
            paths, max_bytes=max_bytes, skip_bad=skip_bad, skipped=skipped, within=within, mapper=mapper
        )
        if rename is not None:
            documents = [d.model_copy(update={"path": rename(d.path)}) for d in documents]
        check_target(
            kt.store, tree, kind="document", paths=[d.path for d in documents], add=add, replace=replace
        )
        if add and chunk_tree:  # the documents already in the tree stay (a new version replaces its old one)
            new = {os.path.normpath(d.path) for d in documents}
            documents = [
                d for d in kt.store.documents(tree) if os.path.normpath(d.path) not in new
            ] + documents
        check_estimate(kt, tree, documents, confirm)
        report = build_chunked(kt, documents, tree=tree, progress=progress, on_client=on_client, replace=True)
    report.skipped = [sk.line() for sk in skipped]
    return report


# -- the one build step: construct in a run, store, report ---------------------------------
def _construct(
    kt: Host,
    tree: str,
    paths: Sequence[str],
    make: Callable[[LLMClient], BuildResult],
    settings: Callable[[], dict[str, object]],
    on_client: Callable[[LLMClient], None] | None,
) -> BuildReport:
    started = time.monotonic()
    with kt.run("build", tree, detail=" ".join(paths)) as run:
        client: LLMClient = run.client
        if on_client:
            on_client(client)
        result = make(client)
        if isinstance(result, SourcesResult):  # first: the tree's save indexes its entries with these
            # lines (saved after it, they made the next search derive and embed every entry again)
            save_doc_infos(kt.store, tree, result.infos)
        kt.store.save_tree(
            tree,
            root_id=result.root_id,
            nodes=result.nodes,
            documents=result.documents,
            model=kt.model.id,
            settings=settings(),
            kind="document",
        )
    # SQLite: the vectors the save wrote go to the file beside the database now, not at the first
    # question of the next process (reading them from their rows took 2.5-6.6 s at 10^5 entries)
    kt.tree_index(tree).keep_vectors_file()
    model = kt.model
    return BuildReport(
        tree=tree,
        root_id=result.root_id,
        documents=len(result.documents),
        nodes=len(result.nodes),
        leaves=result.leaves,
        depth=result.depth,
        fallbacks=result.fallbacks,
        priced=bool(model.input_cost_per_mtok or model.output_cost_per_mtok),
        usage=client.usage.model_copy(),
        seconds=time.monotonic() - started,
        run_id=run.id,
    )


def build_chunked(
    kt: Host,
    documents: Sequence[Document],
    *,
    tree: str,
    progress: Progress | None,
    on_client: Callable[[LLMClient], None] | None,
    replace: bool,
) -> BuildReport:
    """`KnowTree.build_documents`: the chunk tree of documents already in memory."""
    if not documents:
        raise InputError("(no input)", "no documents to build from")
    check_target(
        kt.store, tree, kind="document", paths=[d.path for d in documents], add=True, replace=replace
    )
    s = kt.settings

    def make(client: LLMClient) -> BuildResult:
        from knowtree.distributed import fanout_for

        summarize = s.summaries != "none"  # --summaries none: the zero-call tree
        # with executor ray: the model calls as Ray tasks; the plan and the tree here
        with fanout_for(client, s, wanted=summarize) as fanout:
            return build_tree(
                documents,
                client,
                taxonomy=s.taxonomy or DEFAULT_TAXONOMY,
                chunk_size=s.chunk_size,
                overlap=s.chunk_overlap,
                max_children=s.max_children,
                progress=progress,
                summarize=summarize,
                fanout=fanout,
            )

    def settings() -> dict[str, object]:
        kept = {"chunk_size", "chunk_overlap", "max_children", "taxonomy", "summaries"}
        return {**s.model_dump(include=kept), **kt.model_spec()}

    return _construct(kt, tree, [d.path for d in documents], make, settings, on_client)


def build_structured(
    kt: Host,
    sources: Sequence[StructuredDocument],
    *,
    tree: str,
    add: bool,
    meta: dict[str, str] | None,
    progress: Progress | None,
    on_client: Callable[[LLMClient], None] | None,
    replace: bool,
) -> BuildReport:
    """`KnowTree.build_sources`: the tree that follows the documents' own structure; `add` keeps
    the documents already in the tree (a collection grows), `meta` is user metadata."""
    store, s = kt.store, kt.settings
    check_target(store, tree, kind="document", paths=[sd.path for sd in sources], add=True, replace=replace)
    if meta:
        for sd in sources:
            sd.meta = {**sd.meta, **meta}
    summaries = s.summaries

    def make(client: LLMClient) -> BuildResult:
        nonlocal summaries
        previous = store.load_nodes(tree) if store.tree_exists(tree) else {}
        if summaries == "auto" and add and previous:
            summaries = str(store.tree_settings(tree).get("summaries", "auto"))
        opts = StructureOptions(
            max_pages=s.node_max_pages,
            max_chars=s.node_max_chars,
            max_children=s.max_children,
            taxonomy=s.taxonomy or DEFAULT_TAXONOMY,
            eager_paths=eager_paths(sources, summaries),
        )
        return build_sources(
            sources,
            client,
            opts,
            describe=s.describes_documents(),
            previous=previous,
            old_infos=doc_infos(store, tree) if previous else [],
            stored=store.documents(tree) if add and previous else [],
            add=add,
            progress=progress,
        )

    def settings() -> dict[str, object]:
        return {**s.model_dump(include=SETTINGS_KEPT), **kt.model_spec(), "summaries": summaries}

    return _construct(kt, tree, [sd.path for sd in sources], make, settings, on_client)


# -- removal -------------------------------------------------------------------------------
def remove_document(
    kt: Host, tree: str, path: str, *, use_tree_model: Callable[[bool], None]
) -> RemoveReport:
    """`KnowTree.remove_document`: drop one document; a collection keeps the other documents' nodes,
    a chunk tree is rebuilt from the rest. `use_tree_model(required)` switches `kt` to the model the
    tree was built with."""
    store = kt.store
    info = store.tree_info(tree)
    if info.kind != "document":
        raise UserError(f"tree {tree!r} is a {info.kind} tree: --doc removes documents from document trees")
    infos = doc_infos(store, tree)
    docs = store.documents(tree)
    target = match_document([i.path for i in infos] if infos else [d.path for d in docs], path, tree)
    left = len(infos or docs) - 1
    if not left:
        kt.delete(tree)
        return RemoveReport(tree, target, 0, info.model, info.model, Usage())
    use_tree_model(not infos)
    if infos:
        usage = _remove_from_collection(kt, tree, target)
        return RemoveReport(tree, target, left, info.model, info.model, usage)
    report = build_chunked(
        kt, [d for d in docs if d.path != target], tree=tree, progress=None, on_client=None, replace=True
    )
    return RemoveReport(tree, target, left, info.model, store.tree_info(tree).model, report.usage)


def _remove_from_collection(kt: Host, tree: str, path: str) -> Usage:
    store = kt.store
    previous = store.load_nodes(tree)
    removal = plan_removal(previous, doc_infos(store, tree), tree, path)
    if not removal.rest:
        kt.delete(tree)
        return Usage()
    settings = store.tree_settings(tree)
    with kt.run("build", tree, detail=f"remove {removal.removed}", model=removal.needs_model) as run:
        root_id, usage = finish_removal(removal, previous, run.client)
        store.save_tree(
            tree,
            root_id=root_id,
            nodes=list(removal.nodes.values()),
            documents=[d for d in store.documents(tree) if d.path != removal.removed],
            model=store.tree_info(tree).model,
            settings=settings,
            kind="document",
        )
        save_doc_infos(store, tree, removal.rest)
    return usage


__all__ = [
    "BuildReport",
    "Host",
    "RemoveReport",
    "build_chunked",
    "build_paths",
    "build_structured",
    "check_estimate",
    "check_target",
    "is_chunk_tree",
    "remove_document",
]
