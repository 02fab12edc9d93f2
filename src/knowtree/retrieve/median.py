"""The median cosine that a large tree's dense scores are anchored on (`normalize_dense`), on the
approximate path (PostgreSQL's HNSW index): the median over a fixed sample of the tree's vectors,
since no process reads every vector there."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import numpy as np

    from knowtree.retrieve.embed import Embedder

T = TypeVar("T")
MEDIAN_SAMPLE = 2048  # vectors whose median cosine stands for the tree's on the approximate path


def anchor_median(
    read: Callable[[Callable[[Any], T]], T],
    sql: Any,
    tree: str,
    memo: MutableMapping[Any, Any],
    embedder: Embedder,
    query: np.ndarray,
) -> float | None:
    """The median cosine of `query` over the tree's sample (`sql.vector_sample`); None when the tree
    has no vector. An index object's first question has the database compute it (`sql.sample_median`:
    a process that asks one question, such as a cold `knowtree ask`, reads no vector for it: 25-40 ms
    of a cold connection's time at 10^5 entries); from the second on, the sample's vectors, read once
    and kept in `memo`, are scored here (a query costs 0.3 ms here against ~6 ms in the database)."""
    import numpy as np

    key = ("median-sample", embedder.id)
    if key not in memo:
        memo[key] = None
        return read(lambda c: sql.sample_median(c, tree, embedder.id, query, MEDIAN_SAMPLE))
    sample = memo[key]
    if sample is None:
        got = read(lambda c: sql.vector_sample(c, tree, embedder.id, MEDIAN_SAMPLE))
        sample = memo[key] = np.frombuffer(b"".join(got), dtype=np.float32).reshape(len(got), embedder.dim)
    if not len(sample):
        return None
    scores = sample @ query
    return float(np.partition(scores, len(scores) // 2)[len(scores) // 2])
