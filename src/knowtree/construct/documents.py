"""The structured build: find structure where a PDF has no outline, plan and build the section
tree (reusing unchanged nodes), describe each document; the caller stores the result.

Also: add documents to a collection, remove one (`remove_document`), both without touching the
other documents' nodes. Nothing here sees the store: the facade (`knowtree.building`) passes in what
the tree holds now and stores what comes back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from knowtree.construct.builder import BuildResult, Progress
from knowtree.construct.describe import describe_document
from knowtree.construct.structure import StructureOptions, build_structure, finish_root
from knowtree.construct.toc import find_structure
from knowtree.errors import NotFoundError
from knowtree.ingest.structure import StructuredDocument
from knowtree.llm.client import LLMClient
from knowtree.records import DocInfo
from knowtree.types import Document, Node, Usage

SETTINGS_KEPT = {"node_max_pages", "node_max_chars", "max_children", "taxonomy", "summaries", "structure"}


@dataclass
class SourcesResult(BuildResult):
    """A structured build: the tree's nodes, the documents it holds and their records."""

    documents: list[Document] = field(default_factory=list)
    infos: list[DocInfo] = field(default_factory=list)


def subtree(nodes: dict[str, Node], top: str) -> list[Node]:
    out, stack = [], [top]
    while stack:
        n = nodes[stack.pop()]
        out.append(n)
        stack.extend(n.children)
    return out


def build_sources(
    sources: Sequence[StructuredDocument],
    client: LLMClient,
    opts: StructureOptions,
    *,
    describe: bool,
    previous: dict[str, Node],
    old_infos: Sequence[DocInfo] = (),
    stored: Sequence[Document] = (),
    add: bool = False,
    progress: Progress | None = None,
) -> SourcesResult:
    """Build the tree of `sources`. `previous`: the tree's nodes now (unchanged ones are reused),
    `old_infos`/`stored`: its document records and documents; with `add` the documents not rebuilt
    stay, nodes and all."""
    for sd in sources:
        if sd.pages and not sd.sections:
            if progress:
                progress(f"structure of {sd.path}", 0, 1)
            find_structure(sd, client, max_pages=opts.max_pages)
    old = {i.path: i for i in old_infos}
    result, doc_nodes = build_structure(sources, client, opts, reuse=previous, progress=progress)
    nodes = {n.id: n for n in result.nodes}
    infos: list[DocInfo] = []
    kept_docs: list[Document] = []
    if add:  # the documents already in the tree stay, nodes and all
        new_paths = {sd.path for sd in sources}
        by_path = {d.path: d for d in stored}
        for path, info in old.items():
            if path not in new_paths and info.node_id in previous and path in by_path:
                for n in subtree(previous, info.node_id):
                    nodes.setdefault(n.id, n)
                infos.append(info)
                kept_docs.append(by_path[path])
    for sd in sources:
        infos.append(_doc_info(sd, doc_nodes[sd.path], old.get(sd.path), nodes, client, describe))
    eager_all = all(i.path in opts.eager_paths for i in infos)
    root_id, changed, _ = finish_root(
        [i.node_id for i in infos], nodes, client, eager=eager_all, reuse=previous
    )
    for n in changed:
        nodes[n.id] = n
    all_nodes = list(nodes.values())
    return SourcesResult(
        root_id=root_id,
        nodes=all_nodes,
        usage=client.usage.model_copy(),
        fallbacks=sum(1 for n in all_nodes if n.meta.fallback),
        documents=[*kept_docs, *(sd.document for sd in sources)],
        infos=infos,
    )


def _doc_info(
    sd: StructuredDocument,
    node_id: str,
    old: DocInfo | None,
    nodes: dict[str, Node],
    client: LLMClient,
    describe: bool,
) -> DocInfo:
    meta = {**(old.meta if old else {}), **sd.meta}
    description = ""
    if old is not None and old.node_id == node_id and old.description:
        description = old.description  # unchanged document: no call
        meta = {**old.meta, **sd.meta}
    elif describe:
        titles = [nodes[c].meta.title for c in nodes[node_id].children]
        description, found, _, _ = describe_document(client, sd, titles)
        meta = {**found, **sd.meta}  # what the user says wins over what the model read
    return DocInfo(
        path=sd.path,
        node_id=node_id,
        description=description,
        meta=meta,
        pages=len(sd.pages) if sd.pages else None,
        source=sd.source,
    )


@dataclass
class Removal:
    """What is left of a collection once one document goes: its records and their nodes."""

    removed: str
    rest: list[DocInfo]
    nodes: dict[str, Node]
    eager: bool  # every document left has summaries: the root is synthesized again

    @property
    def needs_model(self) -> bool:
        return self.eager and len(self.rest) > 1


def plan_removal(previous: dict[str, Node], infos: Sequence[DocInfo], tree: str, path: str) -> Removal:
    """Which records and nodes stay when `path` goes (the caller matched the name: guards.match_document)."""
    match = [i for i in infos if i.path == path]
    if len(match) != 1:
        known = ", ".join(i.path for i in infos) or "none"
        raise NotFoundError(f"no document {path!r} in tree {tree!r} (documents: {known})")
    rest = [i for i in infos if i.path != match[0].path]
    nodes: dict[str, Node] = {}
    for info in rest:
        for n in subtree(previous, info.node_id):
            nodes[n.id] = n
    eager = all(previous[i.node_id].meta.summary for i in rest)
    return Removal(match[0].path, rest, nodes, eager)


def finish_removal(
    removal: Removal, previous: dict[str, Node], client: LLMClient | None
) -> tuple[str, Usage]:
    """The new root over the documents left (one call when a collection root with metadata is
    synthesized again; titles-only roots cost none): (root id, usage); `removal.nodes` is updated."""
    root_id, changed, usage = finish_root(
        [i.node_id for i in removal.rest], removal.nodes, client, eager=removal.eager, reuse=previous
    )
    for n in changed:
        removal.nodes[n.id] = n
    return root_id, usage
