"""Hybrid search: BM25 and embedding rankings fused by reciprocal rank (Cormack et al. 2009).

Reciprocal rank fusion needs no score calibration (BM25 scores and cosines live on different
scales): each passage scores Σ w / (c + rank) over the rankings it appears in (c = 60 in the paper;
here BM25 weighs 1 and the embedding's weight and c are tuned on dev data, see `RRF_C`). Lexical
search finds rare names and numbers; the embedding finds paraphrases; fused, a passage either ranks
high on stays near the top.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowtree.retrieve.bm25 import LexicalIndex
from knowtree.retrieve.vectors import VectorIndex

# Fusion defaults, tuned on the dev data (benchmarks/tune_fusion.py; numbers and commands in
# benchmarks/RESULTS.md, "Dense embedders"): dev numbers, not held-out ones.
RRF_C = 5
EMBEDDING_WEIGHT = 0.5


def fusion_defaults(embedder: object) -> tuple[int, float]:
    """(c, embedding weight) for an embedder: its own tuned `fusion` pair, else the defaults above."""
    fusion = getattr(embedder, "fusion", None)
    if isinstance(fusion, tuple) and len(fusion) == 2:
        return int(fusion[0]), float(fusion[1])
    return RRF_C, EMBEDDING_WEIGHT


def rrf_scores(
    rankings: Sequence[Sequence[str]],
    c: int = RRF_C,
    *,
    weights: Sequence[float] | None = None,
    start: int = 1,
) -> dict[str, float]:
    """Σ weight / (c + rank) per id over the rankings (ranks counted from `start`), in order of first
    appearance; a ranking whose weight is 0 is skipped."""
    scores: dict[str, float] = {}
    for n, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[n]
        if not weight:
            continue
        for rank, pid in enumerate(ranking, start=start):
            scores[pid] = scores.get(pid, 0.0) + weight / (c + rank)
    return scores


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[str]], c: int = RRF_C, *, weights: Sequence[float] | None = None
) -> list[tuple[str, float]]:
    """Fused (id, score) best first: Σ weight / (c + rank); ties keep the order of first appearance."""
    return sorted(rrf_scores(rankings, c, weights=weights).items(), key=lambda kv: -kv[1])  # stable


class HybridIndex:
    """Search both indexes `depth` deep and fuse; same `search` signature as the two it wraps.

    `c` and `embedding_weight` default to the embedder's tuned pair (`fusion_defaults`).
    """

    def __init__(
        self,
        lexical: LexicalIndex,
        vectors: VectorIndex,
        *,
        depth: int = 50,
        c: int | None = None,
        embedding_weight: float | None = None,
    ) -> None:
        self.lexical = lexical
        self.vectors = vectors
        self.depth = depth
        tuned_c, tuned_weight = fusion_defaults(vectors.embedder)
        self.c = tuned_c if c is None else c
        self.embedding_weight = tuned_weight if embedding_weight is None else embedding_weight

    def search(
        self, query: str, k: int = 10, *, docs: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        depth = max(k, self.depth)
        rankings = [
            [pid for pid, _ in self.lexical.search(query, depth, docs=docs)],
            [pid for pid, _ in self.vectors.search(query, depth, docs=docs)],
        ]
        return reciprocal_rank_fusion(rankings, self.c, weights=(1.0, self.embedding_weight))[:k]
