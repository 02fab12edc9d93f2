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

Structural fields stay the tree's own: a node keeps its title and time range, and its `about` list
comes first. A malformed reply leaves the node's metadata as it was and is counted (`fallbacks`):
it never becomes a summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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


def enrich_tree(
    nodes: Sequence[Node],
    root_id: str,
    client: LLMClient,
    taxonomy: Sequence[str],
    *,
    leaves: bool = False,
    root: bool = False,
) -> Enriched:
    """Model-written metadata for the nodes of a tree built without it (see the module docstring)."""
    by_id = {n.id: n for n in nodes}
    done = Enriched()

    def put(node: Node, meta: NodeMeta, used: Usage) -> None:
        done.metas[node.id] = _keep_structure(node, meta)
        done.usage.add(used)

    for level in _levels(by_id, root_id):
        for nid in level:
            node = by_id[nid]
            if node.kind is NodeKind.ROOT and not root:
                continue
            kids = [by_id[c] for c in node.children]
            try:
                if node.is_leaf:
                    if leaves and node.text.strip():
                        put(node, *extract_leaf(client, node.text[:META_CHARS], taxonomy))
                elif all(k.is_leaf for k in kids) and not leaves:
                    put(node, *extract_leaf(client, _text_below(node, by_id), taxonomy))
                else:
                    known = [done.metas[k.id] for k in kids if k.id in done.metas]
                    if len(known) == 1 and len(kids) == 1:
                        put(node, known[0], Usage())
                    elif known:
                        put(node, *synthesize_branch(client, known))
            except ModelOutputError:
                done.fallbacks += 1
    return done
