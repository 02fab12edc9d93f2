"""Metadata for a tree that was built without it: the explicit enrich step after a zero-call build.

A zero-call tree (`--summaries none`) is retrievable at once; this adds the model-written metadata
afterwards, bottom-up, with the same prompts as an eager build:

* a leaf (when `leaves`): its own text (`extract_leaf`);
* a **lowest branch** (all children are leaves) when leaves are not enriched: the text below it read
  as one leaf (`extract_leaf` over its leaves' text, up to `META_CHARS`), so a tree whose leaves are
  small (turns, paragraphs) gets one summary per run of them, not one per turn;
* a higher branch: synthesized from its children's metadata (`synthesize_branch`); a branch with a
  single child takes that child's metadata;
* the root only when `root` (its summary is not part of any piece's context).

Nodes in `keep` (already summarized: `is_summarized`) make no call; their stored metadata is what
their parent is synthesized from, so an interrupted enrich resumes where it stopped. A level's calls
run at once, up to the client's concurrency, as a build's do; `on_meta` hears each node's new
metadata as soon as it is made (the facade stores it there).

Structural fields stay the tree's own: a node keeps its title and time range, and its `about` list
comes first. A malformed reply leaves the node's metadata as it was and is counted (`fallbacks`):
it never becomes a summary.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from knowtree.construct.builder import Fanout, Progress
from knowtree.construct.estimate import PROMPT_OVERHEAD_TOKENS, REPLY_TOKENS, BuildEstimate
from knowtree.construct.metadata import extract_leaf, synthesize_branch
from knowtree.construct.structure import META_CHARS
from knowtree.errors import ModelOutputError
from knowtree.llm.client import LLMClient
from knowtree.types import Node, NodeKind, NodeMeta, Usage


@dataclass
class Enriched:
    """New metadata by node id (only nodes that got some), the model usage, and replies refused."""

    metas: dict[str, NodeMeta] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    fallbacks: int = 0


def _keep_structure(node: Node, meta: NodeMeta) -> NodeMeta:
    return meta.model_copy(
        update={
            "title": node.meta.title or meta.title,
            "time_range": node.meta.time_range or meta.time_range,
            "about": list(dict.fromkeys([*node.meta.about, *meta.about]))[:16],
        }
    )


def _text_below(node: Node, nodes: Mapping[str, Node]) -> str:
    parts: list[str] = []
    size = 0
    for cid in node.children:
        text = nodes[cid].text.strip()
        if not text:
            continue
        parts.append(text)
        size += len(text)
        if size >= META_CHARS:
            break
    head = f"{node.meta.title}\n\n" if node.meta.title else ""
    return (head + "\n\n".join(parts))[:META_CHARS]


def _levels(nodes: Mapping[str, Node], root_id: str) -> list[list[str]]:
    """Node ids grouped bottom-up: every node comes after all of its children."""
    depth: dict[str, int] = {}

    def height(nid: str) -> int:
        if nid not in depth:
            kids = nodes[nid].children
            depth[nid] = 0 if not kids else 1 + max(height(c) for c in kids)
        return depth[nid]

    height(root_id)
    out: list[list[str]] = [[] for _ in range(max(depth.values()) + 1)]
    for nid, h in depth.items():
        out[h].append(nid)
    return out


def is_summarized(node: Node) -> bool:
    """The node's metadata was written by a model: a summary that is not a fallback's opening text
    (what `enrich_tree` keeps unless forced)."""
    return bool(node.meta.summary) and node.meta.fallback is None


def plan(
    nodes: Mapping[str, Node],
    root_id: str,
    *,
    leaves: bool = False,
    root: bool = False,
    keep: Collection[str] = frozenset(),
) -> list[list[Node]]:
    """The nodes an enrich works on, level by level bottom-up (see the module docstring)."""

    def wanted(node: Node) -> bool:
        if node.id in keep or (node.kind is NodeKind.ROOT and not root):
            return False
        return not node.is_leaf or (leaves and bool(node.text.strip()))

    return [[nodes[i] for i in level if wanted(nodes[i])] for level in _levels(nodes, root_id)]


def estimate_enrich(
    nodes: Mapping[str, Node],
    levels: Sequence[Sequence[Node]],
    *,
    leaves: bool,
    kept: int,
    tree: str,
    input_cost_per_mtok: float = 0.0,
    output_cost_per_mtok: float = 0.0,
) -> BuildEstimate:
    """What an enrich of `levels` (`plan`) will cost: a call per node, but a branch with one child
    (it takes the child's metadata); prompt sizes as `enrich_tree` makes them (a leaf or a lowest run
    of leaves: its text up to `META_CHARS`; a higher branch: its children's metadata)."""
    calls = chars = branch_children = 0
    for level in levels:
        for node in level:
            lowest = not node.is_leaf and all(nodes[c].is_leaf for c in node.children)
            if not node.is_leaf and len(node.children) == 1 and (leaves or not lowest):
                continue
            calls += 1
            if node.is_leaf:
                chars += min(len(node.text), META_CHARS)
            elif lowest and not leaves:
                chars += min(sum(len(nodes[c].text) for c in node.children), META_CHARS)
            else:
                branch_children += len(node.children)
    input_tokens = chars // 4 + calls * PROMPT_OVERHEAD_TOKENS + branch_children * 120
    output_tokens = calls * REPLY_TOKENS
    priced = input_cost_per_mtok or output_cost_per_mtok
    cost = (
        (input_tokens * input_cost_per_mtok + output_tokens * output_cost_per_mtok) / 1e6 if priced else None
    )
    worked = sum(map(len, levels))
    return BuildEstimate(
        documents=0,
        characters=chars,
        calls=calls,
        tokens=input_tokens + output_tokens,
        cost_usd=cost,
        action="enrich",
        scope=f"for {worked} node(s) of tree {tree!r} ({kept} already summarized, kept)",
    )


def enrich_tree(
    nodes: Sequence[Node],
    root_id: str,
    client: LLMClient,
    taxonomy: Sequence[str],
    *,
    leaves: bool = False,
    root: bool = False,
    keep: Collection[str] = frozenset(),
    on_meta: Callable[[str, NodeMeta], None] | None = None,
    progress: Progress | None = None,
    fanout: Fanout | None = None,
) -> Enriched:
    """Model-written metadata for the nodes of a tree built without it (see the module docstring).

    `keep`: ids of nodes left as they are (their metadata feeds their parents); `on_meta(node id,
    metadata)`: called for each node's new metadata as it is made; `progress(stage, done, total)`:
    after each node worked on; `fanout`: each level's calls made elsewhere (a Ray cluster:
    `knowtree.distributed.RayFanout`), with the same prompts, model and cache, so the metadata is the
    one this process would make."""
    by_id = {n.id: n for n in nodes}
    done = Enriched()
    known = {i: by_id[i].meta for i in keep if i in by_id}  # what a parent is synthesized from

    def job(node: Node) -> tuple[str, str | list[NodeMeta] | NodeMeta | None]:
        """What a node's metadata is made from: ("leaf", text), ("branch", the children's metadata),
        ("take", the single child's metadata) or ("none", None) when no child has any."""
        if node.is_leaf:
            return "leaf", node.text[:META_CHARS]
        kids = [by_id[c] for c in node.children]
        if all(k.is_leaf for k in kids) and not leaves:
            return "leaf", _text_below(node, by_id)
        metas = [known[k.id] for k in kids if k.id in known]
        if len(metas) == 1 and len(kids) == 1:
            return "take", metas[0]
        return ("branch", metas) if metas else ("none", None)

    def make(node: Node) -> tuple[NodeMeta, Usage] | None:
        kind, given = job(node)
        if kind == "leaf":
            return extract_leaf(client, given, taxonomy)  # type: ignore[arg-type]
        if kind == "branch":
            return synthesize_branch(client, given)  # type: ignore[arg-type]
        return (given, Usage()) if kind == "take" else None  # type: ignore[return-value]

    def attempt(node: Node) -> tuple[Node, tuple[NodeMeta, Usage] | None, ModelOutputError | None]:
        try:
            return node, make(node), None
        except ModelOutputError as exc:
            return node, None, exc

    def remote(level: Sequence[Node]) -> Iterator[tuple[Node, tuple[NodeMeta, Usage] | None, bool]]:
        """One level through `fanout`: (node, (meta, usage) or None, the reply stayed invalid)."""
        assert fanout is not None
        texts: list[tuple[str, str]] = []
        children: list[tuple[str, list[NodeMeta]]] = []
        for node in level:
            kind, given = job(node)
            if kind == "leaf":
                texts.append((node.id, given))  # type: ignore[arg-type]
            elif kind == "branch":
                children.append((node.id, given))  # type: ignore[arg-type]
            else:
                yield node, ((given, Usage()) if kind == "take" else None), False  # type: ignore[misc]
        results = [
            *(fanout.leaves(texts, taxonomy) if texts else ()),
            *(fanout.branches(children) if children else ()),
        ]
        for nid, meta, used, failed in results:
            yield by_id[nid], (None if failed else (meta, used)), failed

    def local(
        level: Sequence[Node], pool: ThreadPoolExecutor
    ) -> Iterator[tuple[Node, tuple[NodeMeta, Usage] | None, bool]]:
        for node, made, failed in pool.map(attempt, level):
            if failed is not None and isinstance(failed.usage, Usage):
                done.usage.add(failed.usage)
            yield node, made, failed is not None

    levels = plan(by_id, root_id, leaves=leaves, root=root, keep=keep)
    total, count = sum(map(len, levels)), 0
    with ThreadPoolExecutor(max_workers=client.concurrency) as pool:
        for height, level in enumerate(levels):
            stage = "leaves" if height == 0 else "root" if level and level[0].id == root_id else "branches"
            for node, made, failed in remote(level) if fanout is not None else local(level, pool):
                if failed:
                    done.fallbacks += 1
                elif made is not None:
                    meta = known[node.id] = done.metas[node.id] = _keep_structure(node, made[0])
                    done.usage.add(made[1])
                    if on_meta is not None:
                        on_meta(node.id, meta)
                count += 1
                if progress is not None:
                    progress(stage, count, total)
    return done
