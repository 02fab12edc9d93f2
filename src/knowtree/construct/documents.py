"""The structured build, end to end: find structure where a PDF has no outline, plan and build the
section tree (reusing unchanged nodes), describe each document, store everything in one go.

Also: add documents to a collection, remove one (`remove_document`), both without touching the
other documents' nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from knowtree.construct.builder import Progress
from knowtree.construct.estimate import eager_paths
from knowtree.construct.structure import StructureOptions, build_structure, finish_root
from knowtree.construct.taxonomy import DEFAULT_TAXONOMY
from knowtree.errors import NotFoundError
from knowtree.ingest.structure import StructuredDocument
from knowtree.llm.client import LLMClient
from knowtree.store.docinfo import DocInfo, doc_infos, save_doc_infos
from knowtree.types import Document, Node, Usage

if TYPE_CHECKING:
    from knowtree.core import BuildReport, KnowTree

@dataclass
class RemoveReport:
    """What `remove_document` did: the exact document removed, and the model the tree has now."""

    tree: str
    removed: str
    documents_left: int
    model_before: str
    model_after: str
    usage: Usage

    def line(self) -> str:
        if not self.documents_left:
            return f"removed {self.removed!r}, the last document of tree {self.tree!r}: the tree is deleted"
        relabel = (
            f"; rebuilt with {self.model_after} (it was built with {self.model_before})"
            if self.model_after != self.model_before
            else ""
        )
        return (
            f"removed {self.removed!r} from tree {self.tree!r} ({self.documents_left} document(s) left; "
            f"{self.usage.calls} LLM calls, {self.usage.cached} answered from cache{relabel})"
        )


SETTINGS_KEPT = {"node_max_pages", "node_max_chars", "max_children", "taxonomy", "summaries", "structure"}


def subtree(nodes: dict[str, Node], top: str) -> list[Node]:
    out, stack = [], [top]
    while stack:
        n = nodes[stack.pop()]
        out.append(n)
        stack.extend(n.children)
    return out


def build_sources(
    kt: KnowTree,
    sources: Sequence[StructuredDocument],
    *,
    tree: str,
    add: bool = False,
    progress: Progress | None = None,
    on_client: Callable[[LLMClient], None] | None = None,
) -> BuildReport:
    from knowtree.construct.describe import describe_document
    from knowtree.construct.toc import find_structure
    from knowtree.core import BuildReport

    started = time.monotonic()
    s = kt.settings
    model = kt.model
    store = kt.store
    run_id = store.start_run("build", tree, detail=" ".join(d.path for d in sources)[:500])
    client = kt.client(run_id)
    if on_client:
        on_client(client)
    try:
        for sd in sources:
            if sd.pages and not sd.sections:
                if progress:
                    progress(f"structure of {sd.path}", 0, 1)
                find_structure(sd, client, max_pages=s.node_max_pages)
        previous: dict[str, Node] = store.load_nodes(tree) if store.tree_exists(tree) else {}
        old_infos = {i.path: i for i in doc_infos(store, tree)} if previous else {}
        summaries = s.summaries
        if summaries == "auto" and add and previous:
            summaries = str(store.tree_settings(tree).get("summaries", "auto"))
        opts = StructureOptions(
            max_pages=s.node_max_pages,
            max_chars=s.node_max_chars,
            max_children=s.max_children,
            taxonomy=s.taxonomy or DEFAULT_TAXONOMY,
            eager_paths=eager_paths(sources, summaries),
        )
        result, doc_nodes = build_structure(sources, client, opts, reuse=previous, progress=progress)
        nodes = {n.id: n for n in result.nodes}
        infos: list[DocInfo] = []
        kept_docs: list[Document] = []
        if add:  # the documents already in the tree stay, nodes and all
            new_paths = {sd.path for sd in sources}
            stored = {d.path: d for d in store.documents(tree)} if previous else {}
            for path, info in old_infos.items():
                if path not in new_paths and info.node_id in previous and path in stored:
                    for n in subtree(previous, info.node_id):
                        nodes.setdefault(n.id, n)
                    infos.append(info)
                    kept_docs.append(stored[path])
        for sd in sources:
            node_id = doc_nodes[sd.path]
            old = old_infos.get(sd.path)
            meta = {**(old.meta if old else {}), **sd.meta}
            description = ""
            if old is not None and old.node_id == node_id and old.description:
                description = old.description  # unchanged document: no call
                meta = {**old.meta, **sd.meta}
            elif s.describe:
                titles = [nodes[c].meta.title for c in nodes[node_id].children]
                description, found, _, _ = describe_document(client, sd, titles)
                meta = {**found, **sd.meta}  # what the user says wins over what the model read
            infos.append(
                DocInfo(
                    path=sd.path,
                    node_id=node_id,
                    description=description,
                    meta=meta,
                    pages=len(sd.pages) if sd.pages else None,
                    source=sd.source,
                )
            )
        eager_all = all(i.path in opts.eager_paths for i in infos)
        root_id, changed, _ = finish_root(
            [i.node_id for i in infos], nodes, client, eager=eager_all, reuse=previous
        )
        for n in changed:
            nodes[n.id] = n
        documents = [*kept_docs, *(sd.document for sd in sources)]
        settings = {**s.model_dump(include=SETTINGS_KEPT), **kt.model_spec()}
        settings["summaries"] = summaries
        store.save_tree(
            tree,
            root_id=root_id,
            nodes=list(nodes.values()),
            documents=documents,
            model=model.id,
            settings=settings,
            kind="document",
        )
        save_doc_infos(store, tree, infos)
    except BaseException:
        store.finish_run(run_id, "failed")
        raise
    store.finish_run(run_id, "ok")
    all_nodes = list(nodes.values())
    return BuildReport(
        tree=tree,
        root_id=root_id,
        documents=len(documents),
        nodes=len(all_nodes),
        leaves=sum(1 for n in all_nodes if n.is_leaf),
        depth=max((n.level for n in all_nodes), default=0),
        fallbacks=sum(1 for n in all_nodes if n.meta.fallback),
        priced=bool(model.input_cost_per_mtok or model.output_cost_per_mtok),
        usage=client.usage.model_copy(),
        seconds=time.monotonic() - started,
        run_id=run_id,
    )


def remove_document(kt: KnowTree, tree: str, path: str) -> Usage:
    """Drop one document and its nodes from a tree; the others keep theirs. Returns the usage (a
    collection root with metadata is synthesized again: one call; titles-only roots cost none)."""
    store = kt.store
    previous = store.load_nodes(tree)
    infos = doc_infos(store, tree)
    match = [i for i in infos if i.path == path]  # the caller matched the name (build.guards.match_document)
    if len(match) != 1:
        known = ", ".join(i.path for i in infos) or "none"
        raise NotFoundError(f"no document {path!r} in tree {tree!r} (documents: {known})")
    gone = match[0]
    rest = [i for i in infos if i.path != gone.path]
    if not rest:
        kt.delete(tree)
        return Usage()
    nodes: dict[str, Node] = {}
    for info in rest:
        for n in subtree(previous, info.node_id):
            nodes[n.id] = n
    settings = store.tree_settings(tree)
    eager_all = all(previous[i.node_id].meta.summary for i in rest)
    run_id = store.start_run("build", tree, detail=f"remove {gone.path}")
    client = kt.client(run_id) if eager_all and len(rest) > 1 else None
    try:
        root_id, changed, usage = finish_root(
            [i.node_id for i in rest], nodes, client, eager=eager_all, reuse=previous
        )
        for n in changed:
            nodes[n.id] = n
        docs = [d for d in store.documents(tree) if d.path != gone.path]
        store.save_tree(
            tree,
            root_id=root_id,
            nodes=list(nodes.values()),
            documents=docs,
            model=store.tree_info(tree).model,
            settings=settings,
            kind="document",
        )
        save_doc_infos(store, tree, rest)
    except BaseException:
        store.finish_run(run_id, "failed")
        raise
    store.finish_run(run_id, "ok")
    return usage
