"""Hybrid search: BM25 and embedding rankings fused by reciprocal rank (Cormack et al. 2009).

Reciprocal rank fusion needs no score calibration (BM25 scores and cosines live on different
scales): each passage scores Σ 1 / (c + rank) over the rankings it appears in, with c = 60 as in
the paper. Lexical search finds rare names and numbers; the embedding finds paraphrases; fused,
a passage either ranks high on stays near the top.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowtree.retrieve.bm25 import LexicalIndex
from knowtree.retrieve.vectors import VectorIndex


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], c: int = 60) -> list[tuple[str, float]]:
    """Fused (id, score) best first; ties keep the order of first appearance."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, pid in enumerate(ranking, start=1):
            scores[pid] = scores.get(pid, 0.0) + 1.0 / (c + rank)
    order = list(scores)
    return sorted(scores.items(), key=lambda kv: (-kv[1], order.index(kv[0])))


class HybridIndex:
    """Search both indexes `depth` deep and fuse; same `search` signature as the two it wraps."""

    def __init__(self, lexical: LexicalIndex, vectors: VectorIndex, *, depth: int = 50, c: int = 60) -> None:
        self.lexical = lexical
        self.vectors = vectors
        self.depth = depth
        self.c = c

    def search(
        self, query: str, k: int = 10, *, docs: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        depth = max(k, self.depth)
        rankings = [
            [pid for pid, _ in self.lexical.search(query, depth, docs=docs)],
            [pid for pid, _ in self.vectors.search(query, depth, docs=docs)],
        ]
        return reciprocal_rank_fusion(rankings, self.c)[:k]
