"""Build a Knowledge Tree: chunks → leaves (model-read metadata) → branches of ≤ max_children → root.

The whole shape is planned before any model call: node ids are content hashes (a leaf's from its file
and text, an inner node's from its children's ids), so the plan is deterministic and a re-run of the
same build asks the cache, not the model. Leaves are extracted concurrently up to the client's limit;
each reply is stored as it arrives, so a killed build resumes where it stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from knowtree.construct.metadata import extract_leaf, synthesize_branch
from knowtree.errors import ModelOutputError
from knowtree.ingest.chunk import chunk_document
from knowtree.llm.client import LLMClient
from knowtree.types import Chunk, Document, Node, NodeKind, NodeMeta, Span, Usage, content_hash

Progress = Callable[[str, int, int], None]  # (stage, done, total)
#: a node's metadata as the model gave it: (meta, usage, whether the fallback was used)
Made = tuple[NodeMeta, Usage, bool]


class Fanout(Protocol):
    """Runs one level's metadata calls elsewhere (`knowtree.distributed.RayFanout`): each yields
    (node id, meta, usage, failed) as results arrive, in any order, computed by `leaf_meta` /
    `branch_meta` with the same model and the same cache."""

    def leaves(
        self, items: Sequence[tuple[str, str]], taxonomy: Sequence[str]
    ) -> Iterable[tuple[str, NodeMeta, Usage, bool]]: ...

    def branches(
        self, items: Sequence[tuple[str, list[NodeMeta]]]
    ) -> Iterable[tuple[str, NodeMeta, Usage, bool]]: ...


NO_USAGE = Usage()  # what a node of the zero-call build used: nothing (never added, never changed)


@dataclass
class BuildResult:
    root_id: str
    nodes: list[Node]
    usage: Usage = field(default_factory=Usage)
    fallbacks: int = 0  # nodes whose metadata had to be derived without a valid model reply
    documents: list[Document] = field(default_factory=list)  # what the tree holds

    @property
    def leaves(self) -> int:
        return sum(1 for n in self.nodes if n.is_leaf)

    @property
    def depth(self) -> int:
        return max((n.level for n in self.nodes), default=0)


def balanced_groups(items: Sequence[str], max_children: int) -> list[list[str]]:
    """Split items, in order, into the fewest groups of at most max_children, sizes as even as possible."""
    n = len(items)
    if n == 0:
        return []
    count = math.ceil(n / max_children)
    base, extra = divmod(n, count)
    groups, start = [], 0
    for i in range(count):
        size = base + (1 if i < extra else 0)
        groups.append(list(items[start : start + size]))
        start += size
    return groups


def group_leaves(runs: Sequence[Sequence[str]], max_children: int, min_own: int = 5) -> list[list[str]]:
    """Group leaves in document order without splitting a short document across branches.

    A document with at least `min_own` leaves gets branches of its own (one branch per document
    is the clearest option a navigator can be shown); consecutive short documents share a branch
    while they fit.
    """
    groups: list[list[str]] = []
    current: list[str] = []
    for run in runs:
        if len(run) >= min(min_own, max_children):
            if current:
                groups.append(current)
                current = []
            groups.extend(balanced_groups(run, max_children))
        elif len(current) + len(run) <= max_children:
            current.extend(run)
        else:
            groups.append(current)
            current = list(run)
    if current:
        groups.append(current)
    return groups


def merge_spans(spans: Sequence[Span]) -> list[Span]:
    by_file: dict[str, list[Span]] = {}
    for s in spans:
        by_file.setdefault(s.file, []).append(s)
    return [
        Span(
            file=f,
            start=min(s.start for s in ss),
            end=max(s.end for s in ss),
            line_start=min(s.line_start for s in ss),
            line_end=max(s.line_end for s in ss),
        )
        for f, ss in by_file.items()
    ]


@dataclass
class _Planned:
    id: str
    kind: NodeKind
    level: int
    children: list[str]
    chunk: Chunk | None = None


def plan_tree(
    documents: Sequence[Document], *, chunk_size: int, overlap: int, max_children: int
) -> tuple[list[_Planned], str]:
    """The tree's shape and ids, bottom-up; no model involved."""
    planned: list[_Planned] = []
    runs: list[list[str]] = []
    seen: set[str] = set()
    for doc in documents:
        run = []
        for chunk in chunk_document(doc, size=chunk_size, overlap=overlap):
            leaf_id = content_hash("leaf", doc.path, chunk.text)
            if leaf_id in seen:  # the same text twice in one file: keep both, distinct ids
                leaf_id = content_hash("leaf", doc.path, chunk.text, str(chunk.span.start))
            seen.add(leaf_id)
            planned.append(_Planned(leaf_id, NodeKind.LEAF, 0, [], chunk))
            run.append(leaf_id)
        runs.append(run)
    level_ids = [i for run in runs for i in run]
    level = 0
    groups = group_leaves(runs, max_children) if len(level_ids) > max_children else []
    while len(level_ids) > max_children:
        level += 1
        next_ids = []
        for group in groups:
            branch_id = content_hash("branch", *group)
            planned.append(_Planned(branch_id, NodeKind.BRANCH, level, group))
            next_ids.append(branch_id)
        level_ids = next_ids
        groups = balanced_groups(level_ids, max_children)
    root_id = content_hash("root", *level_ids)
    planned.append(_Planned(root_id, NodeKind.ROOT, level + 1, list(level_ids)))
    return planned, root_id


def build_tree(
    documents: Sequence[Document],
    client: LLMClient,
    *,
    taxonomy: Sequence[str],
    chunk_size: int = 5000,
    overlap: int = 0,
    max_children: int = 8,
    progress: Progress | None = None,
    summarize: bool = True,
    fanout: Fanout | None = None,
) -> BuildResult:
    """`summarize=False` is the zero-call build: leaves keep their text and span, branches are titled
    by position (file and lines), no model is asked; the tree is retrievable as an index at once.
    `fanout`: each level's model calls run there (e.g. on a Ray cluster) instead of in this
    process's thread pool; the plan, the ids and the assembly stay here, so the tree is the same."""
    planned, root_id = plan_tree(documents, chunk_size=chunk_size, overlap=overlap, max_children=max_children)
    total = sum(1 for p in planned if p.kind is NodeKind.LEAF or len(p.children) > 1)
    done = 0
    usage = Usage()
    fallbacks = 0
    nodes: dict[str, Node] = {}

    def tick(stage: str) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(stage, done, total)

    if progress:
        progress("leaves", 0, total)

    def make_leaf(p: _Planned, given: Made | None = None) -> tuple[Node, Usage, bool]:
        assert p.chunk is not None
        if not summarize:
            node = Node(
                id=p.id, kind=p.kind, level=0, meta=NodeMeta(), text=p.chunk.text, spans=[p.chunk.span]
            )
            return node, NO_USAGE, False
        meta, used, failed = given or leaf_meta(client, p.chunk.text, taxonomy)
        node = Node(id=p.id, kind=p.kind, level=0, meta=meta, text=p.chunk.text, spans=[p.chunk.span])
        return node, used, failed

    def make_inner(p: _Planned, given: Made | None = None) -> tuple[Node, Usage, bool]:
        kids = [nodes[c] for c in p.children]
        failed = False
        if not summarize:  # where it is, not what it says: no model
            meta, used = (
                NodeMeta(title=_position_title(kids) if p.kind is not NodeKind.ROOT else ""),
                NO_USAGE,
            )
        elif len(kids) == 1:  # nothing to synthesize: a single child's metadata is the parent's
            meta, used = kids[0].meta.model_copy(), Usage()
        else:
            meta, used, failed = given or branch_meta(client, [k.meta for k in kids])
        spans = merge_spans([s for k in kids for s in k.spans])
        node = Node(id=p.id, kind=p.kind, level=p.level, meta=meta, children=p.children, spans=spans)
        return node, used, failed

    def fanned_out(lvl: int, batch: list[_Planned]) -> Iterator[tuple[Node, Usage, bool]]:
        """A level's model calls run by `fanout`, its nodes assembled here as results arrive."""
        assert fanout is not None
        calls = [p for p in batch if lvl == 0 or len(p.children) > 1]
        for p in batch:
            if lvl and len(p.children) <= 1:
                yield make_inner(p)
        by_id = {p.id: p for p in calls}
        if lvl == 0:
            results = fanout.leaves([(p.id, p.chunk.text) for p in calls if p.chunk is not None], taxonomy)
        else:
            results = fanout.branches([(p.id, [nodes[c].meta for c in p.children]) for p in calls])
        for pid, meta, used, failed in results:
            p = by_id[pid]
            yield (make_leaf if lvl == 0 else make_inner)(p, (meta, used, failed))

    by_level: dict[int, list[_Planned]] = {}
    for p in planned:
        by_level.setdefault(p.level, []).append(p)
    with ThreadPoolExecutor(max_workers=client.concurrency) as pool:
        # the zero-call build asks no model: a thread per node only added locking (~10% of a build)
        run: Callable[..., Iterable[tuple[Node, Usage, bool]]] = pool.map if summarize else map
        for lvl in sorted(by_level):
            batch = by_level[lvl]
            work = make_leaf if lvl == 0 else make_inner
            stage = "leaves" if lvl == 0 else ("root" if batch[0].kind is NodeKind.ROOT else "branches")
            made = fanned_out(lvl, batch) if fanout is not None and summarize else run(work, batch)
            for node, used, failed in made:
                nodes[node.id] = node
                if used is not NO_USAGE:
                    usage.add(used)
                fallbacks += failed
                if node.is_leaf or len(node.children) > 1:
                    tick(stage)
    ordered = [nodes[p.id] for p in planned]
    return BuildResult(
        root_id=root_id, nodes=ordered, usage=usage, fallbacks=fallbacks, documents=list(documents)
    )


def leaf_meta(client: LLMClient, text: str, taxonomy: Sequence[str]) -> tuple[NodeMeta, Usage, bool]:
    """A leaf's metadata from the model (one call, cached), or the fallback when its reply stays
    invalid: (meta, usage, failed). Run here or on a remote worker (`knowtree.distributed`)."""
    try:
        meta, used = extract_leaf(client, text, taxonomy)
    except ModelOutputError as exc:
        return _fallback_meta(text, exc), Usage(), True
    return meta, used, False


def branch_meta(client: LLMClient, metas: Sequence[NodeMeta]) -> tuple[NodeMeta, Usage, bool]:
    """A branch's metadata synthesized from its children's (one call, cached), or the fallback."""
    try:
        meta, used = synthesize_branch(client, list(metas))
    except ModelOutputError as exc:
        return _fallback_meta(" ".join(m.summary for m in metas), exc), Usage(), True
    return meta, used, False


def _fallback_meta(text: str, exc: ModelOutputError) -> NodeMeta:
    opening = " ".join(text.split())[:400]
    return NodeMeta(summary=opening, fallback=f"metadata reply stayed invalid: {exc}"[:300])


TITLE_FILES = 8  # a position title names at most this many files


def _position_title(kids: Sequence[Node]) -> str:
    """A branch's title without a model: the files its leaves come from (not their line numbers,
    which every edit above them would change, and with them the context of every piece below).
    Past `TITLE_FILES` files it names the first and the last and counts them: a title naming every
    file grew with the branch, and every piece's index context repeats its ancestors' titles, so a
    tree of N files stored and indexed O(N²) characters (a 10,000-leaf build: 158 MB of contexts)."""
    files = list(dict.fromkeys(sp.file for k in kids for sp in k.spans))
    if len(files) <= TITLE_FILES:
        return "; ".join(files)
    return f"{files[0]}; …; {files[-1]} ({len(files)} files)"
