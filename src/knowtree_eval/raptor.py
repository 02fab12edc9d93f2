"""A RAPTOR-style collapsed tree (Sarthi et al. 2024), as a baseline: cluster, summarize, retrieve over all levels.

Passages are embedded, clustered, and each cluster is summarized by the LLM into a new node; the
summaries are embedded and clustered again, level by level, until a level is small enough to be the
top. At question time the tree is "collapsed": every node of every level is ranked by cosine
similarity to the question and read in rank order until the token budget is full.

Differences from the paper, on purpose: k-means (seeded, so the same corpus gives the same clusters
and the summaries come back from the cache) instead of UMAP + Gaussian mixtures, hard assignment
(a passage is in one cluster), and the offline static embedder instead of SBERT. Summaries are
plain text, as in RAPTOR; a failed summary raises (it is never stored as a summary).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel

from knowtree.types import content_hash
from knowtree_eval import prompts

if TYPE_CHECKING:
    import numpy as np

    from knowtree.llm.client import LLMClient
    from knowtree.retrieve.embed import Embedder


@dataclass
class RaptorNode:
    id: str
    text: str
    level: int  # 0: a passage; 1+: a summary
    passages: list[str] = field(default_factory=list)  # passage ids under it (itself, for a passage)


class SummaryReply(BaseModel):  # no docstring: it would go into the schema sent
    summary: str = prompts.capped(900, min_length=1)


SUMMARY_SCHEMA = prompts.reply_schema(SummaryReply)


def kmeans(vectors: np.ndarray, k: int, seed: int = 0, iterations: int = 25) -> list[int]:
    """Cluster labels for unit vectors (cosine k-means); deterministic for a seed; no empty cluster."""
    import numpy as np

    n = len(vectors)
    k = max(1, min(k, n))
    rng = np.random.default_rng(seed)
    centers = vectors[rng.choice(n, size=k, replace=False)].copy()
    labels = np.zeros(n, dtype=int)
    for _ in range(iterations):
        new = np.argmax(vectors @ centers.T, axis=1)
        for c in range(k):  # an empty cluster takes the point farthest from its own center
            if not np.any(new == c):
                fit = np.einsum("ij,ij->i", vectors, centers[new])
                new[int(np.argmin(fit))] = c
        if np.array_equal(new, labels) and _ > 0:
            break
        labels = new
        for c in range(k):
            mean = vectors[labels == c].mean(axis=0)
            norm = np.linalg.norm(mean)
            centers[c] = mean / norm if norm else mean
    return [int(x) for x in labels]


def build_collapsed_tree(
    passages: Sequence[tuple[str, str]],
    client: LLMClient,
    embedder: Embedder,
    *,
    cluster_size: int = 6,
    max_levels: int = 3,
    summary_chars: int = 3600,
    seed: int = 0,
) -> list[RaptorNode]:
    """All nodes of the tree (passages first, then each level's summaries), for collapsed retrieval."""
    nodes = [RaptorNode(id=pid, text=text, level=0, passages=[pid]) for pid, text in passages]
    level_nodes = list(nodes)
    for level in range(1, max_levels + 1):
        if len(level_nodes) <= cluster_size:
            break
        vectors = embedder.embed([n.text for n in level_nodes])
        labels = kmeans(vectors, math.ceil(len(level_nodes) / cluster_size), seed=seed)
        members: dict[int, list[RaptorNode]] = {}
        for node, label in zip(level_nodes, labels, strict=True):
            members.setdefault(label, []).append(node)
        next_level = []
        for label in sorted(members):
            group = members[label]
            joined = "\n\n".join(n.text for n in group)
            if len(joined) > summary_chars:  # keep each member's share of a long cluster
                share = summary_chars // len(group)
                joined = "\n\n".join(n.text[:share] for n in group)
            result = client.structured(
                prompts.messages("raptor_summary", text=joined),
                SummaryReply,
                schema=SUMMARY_SCHEMA,
                purpose="raptor_summary",
                max_tokens=260,
            )
            covered = [p for n in group for p in n.passages]
            next_level.append(
                RaptorNode(
                    id=content_hash("raptor", str(level), *covered),
                    text=result.value.summary.strip(),
                    level=level,
                    passages=covered,
                )
            )
        nodes.extend(next_level)
        level_nodes = next_level
    return nodes


def collapsed_search(
    nodes: Sequence[RaptorNode], vectors: np.ndarray, query: str, embedder: Embedder
) -> list[int]:
    """Indexes of `nodes` by cosine similarity to `query`, best first (ties: passages before summaries)."""
    import numpy as np

    scores = vectors @ embedder.embed([query])[0]
    return [int(i) for i in np.argsort(-scores, kind="stable")]
