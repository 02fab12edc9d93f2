"""Seed issues expanded into issue subtrees: a parent issue and child issues that differ by attribute
values (the seed's Prompt G.8), several seeds per call.

Each call shows up to `BATCH` clusters (the seed issue and a few other members) and the attribute
configuration; the reply has one object per cluster with a title, the parent's metadata and, per
attribute, the values that deserve a child issue. Values are `Literal`s of the configuration, so the
schema constrains them. Children are the parent's metadata with one attribute narrowed to one value.
Raw issues of the cluster are then linked to the child whose value their own words name (keyword
metadata, no model), else to the parent.

Cost: the model writes ~100 tokens per cluster, and on data where most raw issues are unique (the
TV questions: ~1.5 per manual section) clusters are mostly singletons. A cluster smaller than
`min_size` (the build's `min_expand`, default 2) is therefore not expanded: its raw issue is the
issue, with keyword metadata and no children. Model calls then follow the de-duplicated groups.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from knowtree.construct.calls import Calls, Here, in_order
from knowtree.ingest.kb_attributes import (
    describe,
    keyword_metadata,
    metadata_model,
    normalize,
    variants_model,
)
from knowtree.ingest.kb_inputs import ANY, AttributeConfig
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import ask, string
from knowtree.records import KBIssue
from knowtree.text import clip

BATCH = 6
MAX_CHILDREN = 4
SHOWN_MEMBERS = 3


@dataclass
class Seed:
    cluster_id: str
    texts: list[str]  # the seed issue first, then other members
    raw_ids: list[str] = field(default_factory=list)


def issue_id(kb: str, cluster_id: str, suffix: str = "") -> str:
    return "i" + hashlib.sha256(f"{kb}\x00{cluster_id}".encode()).hexdigest()[:10] + suffix


def batch_model(config: AttributeConfig, count: int) -> type[BaseModel]:
    meta = metadata_model(config)
    vary = variants_model(config)
    expansion = create_model(
        "IssueExpansion",
        __config__=ConfigDict(extra="ignore"),
        title=(str, string(160, ...)),  # asked for; a longer one is clipped (`subtree`), not refused
        metadata=(meta, ...),
        vary=(vary, ...),
    )
    fields: dict[str, Any] = {f"group_{i + 1}": (expansion, ...) for i in range(count)}
    return create_model(f"SubtreeBatch{count}", __config__=ConfigDict(extra="ignore"), **fields)


def expand_seeds(
    client: LLMClient,
    kb: str,
    config: AttributeConfig,
    seeds: Sequence[Seed],
    *,
    batch: int = BATCH,
    min_size: int = 1,
    progress: Callable[[int, int], None] | None = None,
    calls: Calls | None = None,
) -> tuple[list[KBIssue], dict[str, str]]:
    """Issue nodes (parents, then their children) and raw id → absorbing issue id. Clusters with fewer
    than `min_size` raw issues are not sent to the model (see the module docstring). The batches'
    calls are independent (`calls`, default: one after another through `client`)."""
    issues: list[KBIssue] = []
    links: dict[str, str] = {}
    small = [s for s in seeds if len(s.raw_ids) < min_size]
    for seed in small:  # a lone raw issue: its own words are the issue, keyword metadata, no children
        nodes = subtree(kb, config, seed, seed.texts[0], keyword_metadata(seed.texts[0], config), {})
        issues.extend(nodes)
        links.update(link_members(config, seed, nodes))
    if progress and small:
        progress(len(small), len(seeds))
    expand = [s for s in seeds if len(s.raw_ids) >= min_size]
    parts = [expand[start : start + batch] for start in range(0, len(expand), batch)]
    made = (calls or Here(client)).map(partial(expand_batch, kb, config), parts)
    for part_issues, part_links in in_order(made, [len(p) for p in parts], progress, before=len(small)):
        issues.extend(part_issues)
        links.update(part_links)
    return issues, links


def expand_batch(
    kb: str, config: AttributeConfig, client: LLMClient, part: Sequence[Seed]
) -> tuple[list[KBIssue], dict[str, str]]:
    """One call: the subtrees of a batch of seeds, and their raw issues' links."""
    groups = []
    for i, seed in enumerate(part, start=1):
        lines = [f"group_{i}: seed issue: {clip(seed.texts[0], 220, keep_space=True)}"]
        lines += [f"  similar: {clip(t, 160, keep_space=True)}" for t in seed.texts[1:SHOWN_MEMBERS]]
        groups.append("\n".join(lines))
    reply = ask(
        client,
        batch_model(config, len(part)),
        "kb_subtree",
        domain=config.domain or "general",
        attributes=describe(config),
        groups="\n".join(groups),
        purpose="kb_subtree",
        max_tokens=140 * len(part) + 60,
    ).value
    issues: list[KBIssue] = []
    links: dict[str, str] = {}
    for i, seed in enumerate(part, start=1):
        exp = getattr(reply, f"group_{i}")
        nodes = subtree(kb, config, seed, exp.title, exp.metadata.model_dump(), exp.vary.model_dump())
        issues.extend(nodes)
        links.update(link_members(config, seed, nodes))
    return issues, links


def subtree(
    kb: str,
    config: AttributeConfig,
    seed: Seed,
    title: str,
    metadata: dict[str, Any],
    vary: dict[str, list[str]],
) -> list[KBIssue]:
    """A parent issue and its children (one per attribute value to vary, at most `MAX_CHILDREN`)."""
    meta = normalize(metadata, config)
    title = clip(title, 160, keep_space=True) or clip(seed.texts[0], 160, keep_space=True)
    parent = KBIssue(
        id=issue_id(kb, seed.cluster_id),
        kind="parent",
        parent=None,
        cluster_id=seed.cluster_id,
        title=title,
        metadata=meta,
    )
    out = [parent]
    for attr in config.names():
        for value in dict.fromkeys(vary.get(attr) or []):
            if len(out) > MAX_CHILDREN or value == meta[attr] or value not in config.get(attr).values:
                continue
            child_meta = {**meta, attr: value}
            out.append(
                KBIssue(
                    id=issue_id(kb, seed.cluster_id, f".{len(out)}"),
                    kind="child",
                    parent=parent.id,
                    cluster_id=seed.cluster_id,
                    title=f"{title} ({attr.replace('_', ' ')}: {value})",
                    metadata=child_meta,
                    position=len(out),
                )
            )
    return out


def link_members(config: AttributeConfig, seed: Seed, nodes: Sequence[KBIssue]) -> dict[str, str]:
    """Raw id → the child whose narrowed value the raw issue names, else the parent."""
    parent = nodes[0]
    children = list(nodes[1:])
    links = {}
    for raw_id, text in zip(seed.raw_ids, seed.texts, strict=False):
        links[raw_id] = link_one(config, text, parent, children)
    return links


def link_one(config: AttributeConfig, text: str, parent: KBIssue, children: Sequence[KBIssue]) -> str:
    said = keyword_metadata(text, config)
    for child in children:
        narrowed = [a for a, v in child.metadata.items() if v != parent.metadata.get(a, ANY)]
        if narrowed and all(said.get(a) == child.metadata[a] for a in narrowed):
            return child.id
    return parent.id
