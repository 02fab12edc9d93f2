"""Tree-aware scoring without a model: own scores, roll-up and path smoothing, budget packing.

Every node of a tree is an entry in one pool (RAPTOR's *collapsed* retrieval): leaves and inner
nodes alike get an **own score** from the question, a convex mix of a lexical signal (BM25 over
the entry with its context, divided by the best BM25 of the question so it lies in [0, 1]) and a
dense one (cosine, rescaled so the median entry is 0 and the best is 1, negatives clipped):

    own(n) = w · lex(n) + (1 − w) · dense(n)

The tree then lets a leaf borrow from where it sits. Two published ways, both here:

* **roll-up** (MemTree, the collection chooser's Σ/√(N+1)): an inner node's evidence is the sum of
  its leaves' own scores over √(N+1), so a section where many leaves match beats one lucky leaf;
* **path smoothing** (LATTICE-style path relevance): a leaf's score adds its ancestors' scores,
  damped by `decay` per level up.

    prior(a) = max(own(a), rollup(a)) for every inner node a
    score(l) = own(l) + parent_weight · Σ_k decay^(k−1) · prior(ancestor_k(l))

`prior` is the per-node score a model-guided navigator can start from (pre-rank and prune options).
`pack` fills a token budget with the best leaves, merges leaves that are neighbours in the document,
and returns the groups in document order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ScoreParams:
    """How own scores mix and how much a leaf borrows from its ancestors (measured in RESULTS.md)."""

    lexical_weight: float = 0.5  # share of BM25 in a node's own score; the rest is the dense cosine
    parent_weight: float = 0.3  # weight of the nearest ancestor's prior in a leaf's score
    decay: float = 0.5  # each level further up counts this much less
    rollup: bool = True  # an inner node's prior may come from its leaves (Σ own / √(N+1))
    inner_entries: bool = True  # an inner node's own entry (its text, summary, title) counts too
    repeat_decay: float = 1.0  # < 1: each further piece of the same leaf counts this much less
    dense_norm: str = "median"  # cosines rescaled per question: "median" (→ 0) or "minmax" (lowest → 0)


@dataclass(slots=True)
class TreeShape:
    """The parts of a tree scoring needs: parents, which ids are leaves, leaves in document order."""

    parent: dict[str, str | None]
    leaves: list[str]  # in document order
    order: dict[str, int] = field(default_factory=dict)
    #: each inner node's number of leaves below it, where `leaves` are only some of them (a question's
    #: candidates): the roll-up's N. Empty: counted from `leaves`, which are then all of them
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.order:
            self.order = {leaf: i for i, leaf in enumerate(self.leaves)}

    def ancestors(self, node: str) -> list[str]:
        out = []
        p = self.parent.get(node)
        while p is not None:
            out.append(p)
            p = self.parent.get(p)
        return out


def normalize_lexical(scores: Mapping[str, float]) -> dict[str, float]:
    """BM25 scores (higher is better) divided by the best one; entries that did not match are absent."""
    best = max((s for s in scores.values() if s > 0), default=0.0)
    if best <= 0:
        return {}
    return {k: max(s, 0.0) / best for k, s in scores.items()}


def normalize_dense(
    scores: Mapping[str, float], anchor: str = "median", mid: float | None = None
) -> dict[str, float]:
    """Cosines rescaled per question: the median entry maps to 0, the best to 1, below median to 0.

    Raw cosines of different questions live on different scales (a short question against short
    turns, a long one against pages); anchoring on the median makes the signal comparable with the
    normalised BM25 it is mixed with. `anchor="minmax"`: the lowest entry maps to 0 instead (every
    entry keeps a dense score). `mid`: the median over all entries, when `scores` holds only some
    of them (a question's candidates; the best entry must be among them).
    """
    if not scores:
        return {}
    values = sorted(scores.values())
    if anchor == "minmax":
        mid = values[0]
    elif mid is None:
        mid = values[len(values) // 2]
    top = values[-1]
    span = top - mid
    if span <= 1e-9:
        return {k: 0.0 for k in scores}
    return {k: max(0.0, (s - mid) / span) for k, s in scores.items()}


def own_scores(
    lexical: Mapping[str, float],
    dense: Mapping[str, float],
    ids: Sequence[str],
    lexical_weight: float,
    dense_norm: str = "median",
    dense_mid: float | None = None,
) -> dict[str, float]:
    """The convex mix of the two normalised signals for every id (missing signals count 0);
    `dense_mid`: the median cosine over all entries when `ids` are only some (`normalize_dense`)."""
    lex = normalize_lexical(lexical)
    den = normalize_dense({i: dense[i] for i in ids if i in dense}, dense_norm, dense_mid)
    w = lexical_weight if den else 1.0
    if not lex:
        w = 0.0 if den else w
    return {i: w * lex.get(i, 0.0) + (1.0 - w) * den.get(i, 0.0) for i in ids}


def rollup(shape: TreeShape, own: Mapping[str, float]) -> dict[str, float]:
    """Σ own(leaf) / √(N+1) over the leaves under every inner node (N = its number of leaves)."""
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    for leaf in shape.leaves:
        s = own.get(leaf, 0.0)
        for a in shape.ancestors(leaf):
            total[a] = total.get(a, 0.0) + s
            count[a] = count.get(a, 0) + 1
    count = {a: shape.counts.get(a, n) for a, n in count.items()} if shape.counts else count
    return {a: total[a] / math.sqrt(count[a] + 1) for a in total}


def priors(shape: TreeShape, own: Mapping[str, float], params: ScoreParams) -> dict[str, float]:
    """Every inner node's prior: its own entry's score and/or its leaves' roll-up, each scaled to [0, 1]."""
    inner = {a for leaf in shape.leaves for a in shape.ancestors(leaf)}
    entry = {a: own.get(a, 0.0) for a in inner} if params.inner_entries else {}
    rolled = rollup(shape, own) if params.rollup else {}
    out: dict[str, float] = {}
    for source in (_scaled(entry), _scaled(rolled)):
        for a, s in source.items():
            out[a] = max(out.get(a, 0.0), s)
    return out


def _scaled(scores: Mapping[str, float]) -> dict[str, float]:
    best = max(scores.values(), default=0.0)
    return {k: v / best for k, v in scores.items()} if best > 0 else {}


def leaf_scores(shape: TreeShape, own: Mapping[str, float], params: ScoreParams) -> dict[str, float]:
    """Every leaf's final score: its own plus its ancestors' priors (path smoothing)."""
    prior = priors(shape, own, params) if params.parent_weight > 0 else {}
    out: dict[str, float] = {}
    for leaf in shape.leaves:
        s = own.get(leaf, 0.0)
        weight = params.parent_weight
        for a in shape.ancestors(leaf):
            s += weight * prior.get(a, 0.0)
            weight *= params.decay
        out[leaf] = s
    return out


def rank(
    scores: Mapping[str, float],
    shape: TreeShape,
    *,
    group: Mapping[str, str] | None = None,
    repeat_decay: float = 1.0,
) -> list[str]:
    """Leaves best first; ties in document order (deterministic).

    With `group` (leaf → the node it was cut from) and `repeat_decay` < 1, the j-th best piece of a
    node counts `repeat_decay`**j of its score, so a budget covers more places before it goes deeper
    into one (a question with two pieces of evidence needs both places)."""
    adjusted = dict(scores)
    if group is not None and repeat_decay < 1.0:
        seen: dict[str, int] = {}
        for i in sorted(scores, key=lambda i: (-scores[i], shape.order.get(i, 0))):
            g = group.get(i, i)
            adjusted[i] = scores[i] * repeat_decay ** seen.get(g, 0)
            seen[g] = seen.get(g, 0) + 1
    return sorted(adjusted, key=lambda i: (-adjusted[i], shape.order.get(i, 0)))


@dataclass(slots=True)
class Group:
    """Neighbouring leaves packed together: shown as one evidence item."""

    leaves: list[str]
    score: float  # the best leaf's score
    tokens: int


def pack(
    ranked: Sequence[str],
    tokens: Mapping[str, int],
    budget: int,
    shape: TreeShape,
    scores: Mapping[str, float],
) -> list[Group]:
    """Fill `budget` tokens with the best leaves (in rank order; one that does not fit is passed
    over for the next that does), then merge leaves that are neighbours in the document and return
    the groups in document order."""
    chosen: list[str] = []
    used = 0
    for leaf in ranked:
        n = tokens.get(leaf, 0)
        if used + n > budget:
            continue
        chosen.append(leaf)
        used += n
        if used >= budget:
            break
    chosen.sort(key=lambda i: shape.order.get(i, 0))
    groups: list[Group] = []
    for leaf in chosen:
        last = groups[-1] if groups else None
        if (
            last is not None
            and shape.order.get(leaf, -2) == shape.order.get(last.leaves[-1], -5) + 1
            and _same_branch(shape, leaf, last.leaves[-1])
        ):
            last.leaves.append(leaf)
            last.score = max(last.score, scores.get(leaf, 0.0))
            last.tokens += tokens.get(leaf, 0)
        else:
            groups.append(Group([leaf], scores.get(leaf, 0.0), tokens.get(leaf, 0)))
    return groups


def _same_branch(shape: TreeShape, a: str, b: str) -> bool:
    """Neighbours worth merging: pieces of one leaf, or of sibling leaves (consecutive turns, pages)."""
    pa, pb = shape.parent.get(a), shape.parent.get(b)
    return pa == pb or (pa is not None and pb is not None and shape.parent.get(pa) == shape.parent.get(pb))
