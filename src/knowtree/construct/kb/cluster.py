"""De-duplication of raw issues: a similarity over issues and average-linkage agglomerative clustering.

Why not a library: the seed uses UMAP + HDBSCAN, and scikit-learn / scipy would give agglomerative
clustering, but none of them is a dependency of knowtree and each is heavy for what is needed here.
Raw issues per KB are few (hundreds to a few thousands), so exact average linkage over a dense
similarity matrix is a few dozen lines of numpy, deterministic (no random seed at all: ties break by
index), and stops at a similarity threshold instead of needing a number of clusters. The
Lance–Williams update keeps it O(n²) memory and about n·n² / 10⁹ seconds (960 issues: ~1 s); beyond
~5,000 issues a first k-means pass would be needed (not implemented: `cluster` refuses instead).

The similarity mixes three views of an issue, each a cosine in [−1, 1]:
* the dense embedding of its text, mean-centred (paraphrases),
* TF-IDF over the raw issues' words (rare product names, symptoms: what BM25 sees),
* its grounding: which domain documents the hybrid retriever finds for it (two issues answered by
  the same manual section are the same issue for a knowledge base, even when worded apart).
`center` and `tfidf` live in `retrieve/similarity.py`: the issue ranking uses the same similarity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from knowtree.errors import UserError
from knowtree.retrieve.similarity import center, tfidf  # shared with the issue ranking (kbindex)

if TYPE_CHECKING:
    import numpy as np

__all__ = ["MAX_ISSUES", "agglomerate", "center", "grounding_matrix", "medoid", "similarity", "tfidf"]

MAX_ISSUES = 5000


def grounding_matrix(hits: Sequence[Sequence[str]]) -> np.ndarray:
    """Rows: an issue's retrieved documents weighted 1/rank, L2-normalized."""
    import numpy as np

    docs = {d: i for i, d in enumerate(sorted({d for h in hits for d in h}))}
    out = np.zeros((len(hits), max(1, len(docs))), dtype=np.float32)
    for row, h in enumerate(hits):
        for rank, d in enumerate(h, start=1):
            out[row, docs[d]] = max(out[row, docs[d]], 1.0 / rank)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1
    return out / norms


def similarity(
    dense: np.ndarray,
    lexical: np.ndarray | None = None,
    grounding: np.ndarray | None = None,
    weights: tuple[float, float, float] = (0.4, 0.3, 0.3),
) -> np.ndarray:
    """Weighted sum of the cosine matrices of the views given (weights renormalized over them)."""
    parts = [(dense, weights[0]), (lexical, weights[1]), (grounding, weights[2])]
    parts = [(m, w) for m, w in parts if m is not None and w > 0]
    total = sum(w for _, w in parts)
    sim = sum((w / total) * (m @ m.T) for m, w in parts)
    return sim.astype("float32")  # type: ignore[union-attr]


def agglomerate(sim: np.ndarray, threshold: float, *, max_size: int = 0) -> list[list[int]]:
    """Average-linkage clusters: merge the most similar pair while its average similarity ≥ threshold.

    `max_size` > 0 stops clusters from growing beyond it. Clusters are returned largest first, members
    in index order.
    """
    import numpy as np

    n = sim.shape[0]
    if n > MAX_ISSUES:
        raise UserError(
            f"{n} raw issues: clustering handles up to {MAX_ISSUES} at once; add the rest with KB.add"
        )
    if n == 0:
        return []
    s = sim.astype(np.float64, copy=True)
    np.fill_diagonal(s, -np.inf)
    sizes = np.ones(n, dtype=np.int64)
    members: list[list[int]] = [[i] for i in range(n)]
    alive = np.ones(n, dtype=bool)
    while True:
        flat = int(np.argmax(s))
        a, b = divmod(flat, n)
        if not np.isfinite(s[a, b]) or s[a, b] < threshold:
            break
        if max_size and sizes[a] + sizes[b] > max_size:
            s[a, b] = s[b, a] = -np.inf
            continue
        # merge b into a (Lance–Williams for average linkage)
        merged = (sizes[a] * s[a] + sizes[b] * s[b]) / (sizes[a] + sizes[b])
        s[a] = merged
        s[:, a] = merged
        s[a, a] = -np.inf
        s[b] = -np.inf
        s[:, b] = -np.inf
        sizes[a] += sizes[b]
        members[a].extend(members[b])
        members[b] = []
        alive[b] = False
    clusters = [sorted(members[i]) for i in range(n) if alive[i]]
    return sorted(clusters, key=lambda c: (-len(c), c[0]))


def medoid(sim: np.ndarray, cluster: Sequence[int]) -> int:
    """The member most similar on average to the others: the cluster's seed issue."""
    if len(cluster) == 1:
        return cluster[0]
    idx = list(cluster)
    block = sim[idx][:, idx]
    return idx[int(block.sum(axis=1).argmax())]
