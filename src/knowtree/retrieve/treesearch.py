"""Question → scored, packed, cited evidence from a tree's index, without a model.

    index = TreeIndex(store, "docs")
    ranking = rank_tree(index, "Who approved the budget?", embedder=get_embedder())
    evidence = pack_evidence(index, ranking, budget_tokens=1024)   # document order, with citations
    found = search_index(index, "Who approved the budget?", 1024)   # the three in one (+ an optional re-ranking step)

`rank_tree` scores every entry (pieces, leaves, sections: one pool), lets pieces borrow from their
ancestors (`treescore`), and keeps the per-node prior for navigators that want to start from it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, Field

from knowtree.retrieve.choices import choice_queries
from knowtree.retrieve.treescore import (
    Group,
    ScoreParams,
    TreeShape,
    leaf_scores,
    own_scores,
    pack,
    priors,
    rank,
)
from knowtree.types import Citation

if TYPE_CHECKING:
    from knowtree.retrieve.embed import Embedder
    from knowtree.retrieve.treeindex import IndexRow, TreeIndex

# measured on the dev sets with the default embedder (benchmarks/RESULTS.md, "Tree as an index"):
# a conversation's turns lean on their session and neighbourhood (path smoothing: +0.07 any-evidence
# hit within 1,024 tokens on LoCoMo); document pieces gain nothing from it (HotpotQA, FinanceBench) but
# from covering more places (repeat decay: +0.06 on FinanceBench pages, +0.06 on HotpotQA all-hit)
DOCUMENT_PARAMS = ScoreParams(lexical_weight=0.9, parent_weight=0.0, decay=0.5, repeat_decay=0.5)
CONVERSATION_PARAMS = ScoreParams(lexical_weight=0.8, parent_weight=0.8, decay=0.7)
DENSE_SECONDS = 120.0  # embed a whole index only when it takes at most this long (measured on 64)
DENSE_CANDIDATES = 48  # otherwise score this many lexical candidates (and their ancestors) densely
#: an index of at least this many entries is searched by candidates (`rank_candidates`): the top of
#: its inverted index and of its vectors, and their ancestors, read by id; a smaller one is read
#: whole and every entry scored (`rank_tree`). KNOWTREE_EXACT_ENTRIES overrides it (0: always candidates).
#: Measured (benchmarks/RESULTS.md, E9; a loaded 2-core machine): a warm question on 2,305 entries took
#: 129 ms exact and 55 ms by candidates, on 11,500 entries 167 ms and 18 ms
EXACT_ENTRIES = 1_000
CANDIDATES_MIN = 200  # candidates of each kind (lexical, dense) at the least, whatever the budget
CANDIDATES_PER_TOKEN = 0.25  # and this many per token of the budget (a piece is ~100 tokens)
CANDIDATES_MAX = 2000
#: a tree whose leaves borrow from their ancestors (`parent_weight` > 0: conversations) reads this many
#: times more: a leaf no signal found can rank by its session's prior alone (LoCoMo, every tree searched
#: by candidates: hit@1024 0.857 with 256 candidates of each kind, 0.874 = the exact path's with 1,000)
BORROWING_FACTOR = 4


def default_params(kind: str) -> ScoreParams:
    return CONVERSATION_PARAMS if kind == "conversation" else DOCUMENT_PARAMS


class Evidence(BaseModel):
    """One packed evidence item: neighbouring pieces of one leaf (or of consecutive leaves), merged."""

    text: str
    score: float
    node_id: str  # the leaf the (first) piece comes from
    path: list[str] = Field(default_factory=list)  # node ids from the root down to that leaf
    citation: Citation
    pieces: list[str] = Field(default_factory=list)  # index entry ids, in document order
    tokens: int = 0


@dataclass(slots=True)
class Ranking:
    """Pieces best first with their scores; `prior` is every inner node's score (for navigators)."""

    pieces: list[str]
    scores: dict[str, float]
    prior: dict[str, float] = field(default_factory=dict)
    own: dict[str, float] = field(default_factory=dict)


def shape_of(index: TreeIndex) -> TreeShape:
    """The tree's shape as its index rows give it (computed once per index object)."""
    shape = index.memo.get("shape")
    if shape is None:
        rows = index.rows
        shape = index.memo["shape"] = TreeShape(
            parent={r.id: r.parent for r in rows},
            leaves=[r.id for r in rows if r.leaf],  # rows come in document order
        )
    return shape


def rank_tree(
    index: TreeIndex,
    question: str,
    *,
    embedder: Embedder | None = None,
    params: ScoreParams | None = None,
    shape: TreeShape | None = None,
) -> Ranking:
    """Score every entry for `question` (BM25 + dense when an embedder is given) and rank the pieces."""
    params = params or DOCUMENT_PARAMS
    shape = shape or shape_of(index)
    ids = [r.id for r in index.rows]
    lexical = index.lexical(question)
    dense: dict[str, float] = {}
    if embedder is not None:  # a slow embedder on a large index: the best lexical pieces and their nodes
        best = sorted(lexical, key=lambda i: -lexical[i])[:DENSE_CANDIDATES]
        near = {a for i in best for a in shape.ancestors(i)}
        dense = index.dense(question, embedder, candidates=[*best, *near], max_seconds=DENSE_SECONDS)
    own = own_scores(lexical, dense, ids, params.lexical_weight, params.dense_norm)
    scores = leaf_scores(shape, own, params)
    group = {r.id: r.node for r in index.rows if r.leaf} if params.repeat_decay < 1.0 else None
    ranked = rank(scores, shape, group=group, repeat_decay=params.repeat_decay)
    return Ranking(ranked, scores, priors(shape, own, params), own)


def exact_entries() -> int:
    """The size from which an index is searched by candidates (`EXACT_ENTRIES`, or the environment's)."""
    raw = os.environ.get("KNOWTREE_EXACT_ENTRIES", "").strip()
    return int(raw) if raw.isdigit() else EXACT_ENTRIES


def candidate_count(budget_tokens: int) -> int:
    """How many candidates of each kind a question reads for a budget."""
    raw = os.environ.get("KNOWTREE_CANDIDATES", "").strip()  # a fixed count, for measuring
    if raw.isdigit():
        return int(raw)
    return max(CANDIDATES_MIN, min(CANDIDATES_MAX, int(budget_tokens * CANDIDATES_PER_TOKEN)))


def rank_candidates(
    index: TreeIndex,
    question: str,
    *,
    k: int,
    embedder: Embedder | None = None,
    params: ScoreParams | None = None,
) -> tuple[Ranking, dict[str, IndexRow]]:
    """`rank_tree` over a question's candidates only: the `k` best entries by BM25 (the inverted
    index's own top-k) and the `k` nearest by cosine, and every ancestor of them, read by id.

    Own scores are those of the exact path: BM25 is divided by the best (the first candidate) and
    cosines are anchored on the median over every entry (a fixed sample's on PostgreSQL's HNSW path);
    the roll-up divides by each ancestor's stored number of leaves. What differs: entries outside
    the candidates count 0 (in the roll-up and the inner entries' priors). Returns the ranking and
    the rows read (for packing)."""
    params = params or DOCUMENT_PARAMS
    lexical = index.lexical_top(question, k)
    near: dict[str, float] = {}
    cosines: Callable[[Sequence[str]], dict[str, float]] = lambda _ids: {}  # noqa: E731
    mid = None
    if embedder is not None:
        near, cosines, mid = index.dense_top(question, embedder, k)
    rows = index.with_ancestors([*lexical, *near])
    dense = cosines(list(rows))
    shape = view_shape(rows)
    own = own_scores(lexical, dense, list(rows), params.lexical_weight, params.dense_norm, mid)
    scores = leaf_scores(shape, own, params)
    group = {i: r.node for i, r in rows.items() if r.leaf} if params.repeat_decay < 1.0 else None
    ranked = rank(scores, shape, group=group, repeat_decay=params.repeat_decay)
    return Ranking(ranked, scores, priors(shape, own, params), own), rows


def view_shape(rows: Mapping[str, IndexRow]) -> TreeShape:
    """The part of a tree's shape some entries and all their ancestors give (leaves by document order,
    inner entries with their stored leaf counts)."""
    leaves = sorted((r for r in rows.values() if r.leaf), key=lambda r: r.order)
    return TreeShape(
        parent={i: r.parent for i, r in rows.items()},
        leaves=[r.id for r in leaves],
        order={r.id: r.order for r in leaves},
        counts={i: r.leaves for i, r in rows.items() if not r.leaf},
    )


def fuse(rankings: Sequence[Ranking]) -> Ranking:
    """Several queries' rankings of one index as one, by turns: every ranking's first piece (the
    first ranking's before the second's), then every ranking's second, and so on, each piece where
    it first comes. So each query's best evidence is in the budget, whatever the others' scores
    (a multiple-choice question searched once per option). A piece's score (and a node's prior) is
    its best over the rankings, each ranking's divided by its best first."""
    if len(rankings) == 1:
        return rankings[0]
    place: dict[str, tuple[int, int]] = {}
    for q, r in enumerate(rankings):
        for i, p in enumerate(r.pieces):
            if p not in place or (i, q) < place[p]:
                place[p] = (i, q)

    def best(attr: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for r in rankings:
            values = getattr(r, attr)
            top = max(values.values(), default=0.0) or 1.0
            for k, v in values.items():
                out[k] = max(out.get(k, 0.0), v / top)
        return out

    return Ranking(sorted(place, key=lambda p: place[p]), best("scores"), best("prior"), best("own"))


def pack_evidence(
    index: TreeIndex,
    ranking: Ranking,
    budget_tokens: int,
    *,
    shape: TreeShape | None = None,
    rows: Mapping[str, IndexRow] | None = None,
) -> list[Evidence]:
    """The best pieces that fit `budget_tokens`, neighbours merged, in document order, with citations.
    `rows`: the entries the ranking was made from and their ancestors (default: every entry)."""
    shape = shape or shape_of(index)
    rows = rows if rows is not None else {r.id: r for r in index.rows}
    tokens = {r.id: max(1, (len(r.text) + 3) // 4) for r in rows.values() if r.leaf}
    groups = []
    for g in pack(ranking.pieces, tokens, budget_tokens, shape, ranking.scores):
        run = [g.leaves[0]]
        for p in g.leaves[1:]:  # one item never spans two files
            if rows[p].cite.get("file") != rows[run[-1]].cite.get("file"):
                groups.append(
                    Group(run, max(ranking.scores.get(x, 0.0) for x in run), sum(tokens[x] for x in run))
                )
                run = []
            run.append(p)
        groups.append(Group(run, max(ranking.scores.get(x, 0.0) for x in run), sum(tokens[x] for x in run)))
    out = []
    for g in groups:
        first, last = rows[g.leaves[0]], rows[g.leaves[-1]]
        cite = first.cite
        path = [a for a in reversed(shape.ancestors(first.node)) if a != first.id]
        citation = Citation(
            file=str(cite.get("file", "")),
            line_start=int(cite.get("line_start", 0)),
            line_end=int(last.cite.get("line_end", cite.get("line_end", 0))),
            node_id=first.node,
            page_start=cite.get("page_start"),
            page_end=last.cite.get("page_end", cite.get("page_end")),
            timestamp=cite.get("timestamp"),
        )
        out.append(
            Evidence(
                text=_join(rows[p].text for p in g.leaves),
                score=round(g.score, 6),
                node_id=first.node,
                path=[*path, first.node],
                citation=citation,
                pieces=list(g.leaves),
                tokens=g.tokens,
            )
        )
    return out


def resolve_embedder(embedder: Embedder | str | None) -> Embedder | None:
    """An embedder from a name ("default": the project's default; "hash": the test fake), or None
    for BM25 only. The default falls back to BM25 only when the embedding extra is not installed."""
    if embedder is None or not isinstance(embedder, str):
        return embedder
    from knowtree.errors import ConfigError
    from knowtree.retrieve.embed import get_embedder

    if embedder == "default":
        try:
            return get_embedder()
        except ConfigError:  # no embedding extra: lexical retrieval still works
            return None
    return get_embedder(embedder)


class Reranked(Protocol):
    """What a re-ranking step returns (the judged beam's `NavResult` is one): the new ranking."""

    ranking: Ranking


#: a step between ranking and packing (the model's judged beam): (index, ranking, shape) → a new ranking
Rerank = Callable[["TreeIndex", Ranking, TreeShape], Reranked]


@dataclass
class Found:
    """What `search_index` found: the index and its shape, the final ranking, the evidence packed
    from it, and what the re-ranking step returned (None without one)."""

    index: TreeIndex
    shape: TreeShape
    ranking: Ranking
    evidence: list[Evidence]
    reranked: Reranked | None = None
    rows: Mapping[str, IndexRow] | None = None  # the entries read, where not every entry was

    def texts(self) -> dict[str, str]:
        """Each packed piece's index text (to place the pieces of a long message within it)."""
        wanted = [p for ev in self.evidence for p in ev.pieces]
        if self.rows is not None:
            return {p: self.rows[p].text for p in wanted if p in self.rows}
        keep = set(wanted)
        return {r.id: r.text for r in self.index.rows if r.id in keep}


def search_index(
    index: TreeIndex,
    question: str,
    budget_tokens: int = 1024,
    *,
    kind: str = "document",
    embedder: Embedder | str | None = "default",
    params: ScoreParams | None = None,
    scope: Sequence[str] | None = None,
    rerank: Rerank | None = None,
    shape: TreeShape | None = None,
    also: Sequence[str] = (),
    choices: bool = True,
) -> Found:
    """The one sequence every kind of tree retrieves by: rank the index for `question` (no model),
    keep only pieces below `scope`'s nodes where given (a collection's chosen documents), let
    `rerank` reorder the ranking where given (`answer.nav.judged_beam`: the model's grades), pack
    the budget. `shape`: the index's `shape_of`, when the caller searches it more than once.
    `also`: more queries, each ranked too and the rankings taken by turns (`fuse`); by default
    (`choices`) a multiple-choice question's are the question with each of its options
    (`choices.choice_queries`), so every option's best evidence is read.

    An index of `exact_entries()` entries or more is searched by candidates (`rank_candidates`:
    it is never read whole) unless a re-ranking step is given (the navigators read every entry);
    `shape` is then the part of the tree the candidates gave."""
    model = resolve_embedder(embedder)
    params = params or default_params(kind)
    queries = [question, *(also or (choice_queries(question) if choices else ()))]
    rows: dict[str, IndexRow] | None = None
    if rerank is None and index.entries >= exact_entries():
        rows = {}
        rankings = []
        k = candidate_count(budget_tokens) * (BORROWING_FACTOR if params.parent_weight > 0 else 1)
        found = index.in_one_read(  # one read transaction for all of them (PostgreSQL's round trips)
            lambda: [rank_candidates(index, q, k=k, embedder=model, params=params) for q in queries]
        )
        for got, read in found:
            rankings.append(got)
            rows.update(read)
        ranking = fuse(rankings)
        shape = view_shape(rows)
    else:
        shape = shape or shape_of(index)
        ranking = fuse([rank_tree(index, q, embedder=model, params=params, shape=shape) for q in queries])
    if scope is not None:
        keep = set(scope)
        ranking.pieces = [p for p in ranking.pieces if not keep.isdisjoint(shape.ancestors(p))]
    reranked = rerank(index, ranking, shape) if rerank is not None else None
    if reranked is not None:
        ranking = reranked.ranking
    evidence = pack_evidence(index, ranking, budget_tokens, shape=shape, rows=rows)
    return Found(index=index, shape=shape, ranking=ranking, evidence=evidence, reranked=reranked, rows=rows)


def _join(texts: Iterable[str]) -> str:
    """Neighbouring pieces as one text: a piece that does not end a line is followed by a newline."""
    out = ""
    for t in texts:
        out += t if not out or out[-1].isspace() else "\n" + t
    return out
