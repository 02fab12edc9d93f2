"""Same-unit flat baselines: BM25, dense and fused rankings over exactly the pieces `tree` indexes.

The page- and passage-level baselines (`bm25`, `embedding`, `hybrid`) rank whole passages: on a
filing a page is ~900 tokens, so two pages fill 2,048 tokens while `tree` shows twenty ~100-token
pieces. These methods rank the tree's own leaf entries (the same ~400-character pieces, cut by
`retrieve.context`, the same text shown, the same tokens counted) with no tree at all, so what
`tree` adds over them is its structure and scoring, not its unit:

| method | score of a piece |
|---|---|
| `flat-bm25` | BM25 (FTS5, porter) of the piece's text |
| `flat-dense` | cosine of the run's embedder (`--embedder`) with the piece's text |
| `flat-fused` | 0.3 × BM25 / best BM25 + 0.7 × cosine min-max scaled over the corpus's pieces |
| `flat-rrf` | reciprocal-rank fusion of the two rankings (1 / (60 + rank), summed) |

Each with `-ctx` (`flat-fused-ctx`…): the piece is indexed and embedded with its entry's context
prepended (the document, page, session, speaker: "3M 2018 10K, page 12"), the text the tree itself
indexes. Only the piece's text is shown and counted against the budget, as for `tree`.

The pieces, their BM25 indexes and vectors are built once per corpus and shared by every flat method
of the run (`CorpusContext.shared`); building them is charged as the first method's setup.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from knowtree_eval.base import CorpusContext, Record
from knowtree_eval.datasets import Case
from knowtree_eval.scoring import base_record, retrieval_metrics

if TYPE_CHECKING:
    import numpy as np

    from knowtree.retrieve.bm25 import LexicalIndex
    from knowtree.retrieve.embed import Embedder

SIGNALS = ("bm25", "dense", "fused", "rrf")
LEXICAL_WEIGHT = 0.3  # the fused score's BM25 share (the linear fusion: 0.3 BM25 + 0.7 cosine)
RRF_K = 60
SHARED_KEY = "flat-pieces"


@dataclass
class Pieces:
    """A corpus's tree pieces in document order: ids, passage, shown text, context, tokens shown;
    their BM25 indexes and vectors (per variant, built on first use)."""

    ids: list[str]
    passage: list[str]
    text: list[str]
    context: list[str]
    tokens: list[int]
    lexical: dict[bool, LexicalIndex] = field(default_factory=dict)
    vectors: dict[tuple[str, bool], np.ndarray] = field(default_factory=dict)

    def bodies(self, with_context: bool) -> list[str]:
        """What is indexed: the text, or the context and the text as the tree's index has them."""
        if not with_context:
            return self.text
        return [f"{c}\n{t}" if c else t for c, t in zip(self.context, self.text, strict=True)]

    def bm25(self, with_context: bool) -> LexicalIndex:
        if with_context not in self.lexical:
            from knowtree.retrieve.bm25 import LexicalIndex, Passage

            index = LexicalIndex(":memory:")
            index.add(Passage(str(i), body) for i, body in enumerate(self.bodies(with_context)))
            self.lexical[with_context] = index
        return self.lexical[with_context]

    def matrix(self, embedder: Embedder, with_context: bool) -> np.ndarray:
        key = (embedder.id, with_context)
        if key not in self.vectors:
            from knowtree.retrieve.treeindex import EMBED_CHARS

            self.vectors[key] = _embed(embedder, [b[:EMBED_CHARS] for b in self.bodies(with_context)])
        return self.vectors[key]

    def close(self) -> None:
        for index in self.lexical.values():
            index.close()
        self.lexical.clear()
        self.vectors.clear()


def _embed(embedder: Embedder, texts: list[str], batch: int = 256) -> np.ndarray:
    import numpy as np

    parts = [embedder.embed(texts[i : i + batch]) for i in range(0, len(texts), batch)]
    return np.concatenate(parts) if parts else np.zeros((0, embedder.dim), dtype=np.float32)


def corpus_pieces(ctx: CorpusContext) -> Pieces:
    """The leaf entries of the corpus's zero-call tree (`treemethod.corpus_tree`, indexed as `tree`
    indexes it), once per corpus context."""
    found = ctx.shared.get(SHARED_KEY)
    if isinstance(found, Pieces):
        return found
    from knowtree_eval.treemethod import TreeMethod

    tree = TreeMethod(use_dense=False)
    built = tree.built(ctx)
    try:
        rows = [r for r in built.index.rows if r.leaf]  # document order
        pieces = Pieces(
            ids=[r.id for r in rows],
            passage=[built.piece_passage[r.id] for r in rows],
            text=[r.text for r in rows],
            context=[r.context for r in rows],
            tokens=[built.piece_tokens[r.id] for r in rows],
        )
    finally:
        built.store.close()
    ctx.shared[SHARED_KEY] = pieces
    return pieces


def minmax(values: np.ndarray) -> np.ndarray:
    """Values scaled to [0, 1] (all equal: all 0)."""
    low, high = float(values.min(initial=0.0)), float(values.max(initial=0.0))
    if values.size == 0 or high - low <= 1e-12:
        return values * 0.0
    return (values - low) / (high - low)


@dataclass
class FlatPiecesMethod:
    """Flat top-k over the tree's pieces by one signal (`SIGNALS`), with or without their context."""

    signal: str = "fused"
    with_context: bool = False
    k: int = 5
    budget: int = 2048
    lexical_weight: float = LEXICAL_WEIGHT
    name: str = ""
    _embedder: Embedder | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.signal not in SIGNALS:
            raise ValueError(f"unknown flat signal {self.signal!r} (known: {', '.join(SIGNALS)})")
        self.name = self.name or method_name(self.signal, self.with_context)

    def embedder(self, ctx: CorpusContext) -> Embedder:
        if self._embedder is None:
            from knowtree.retrieve.embed import get_embedder

            self._embedder = get_embedder(ctx.embedder)
        return self._embedder

    def prepare(self, ctx: CorpusContext) -> None:
        pieces = corpus_pieces(ctx)
        if self.signal != "dense":
            pieces.bm25(self.with_context)
        if self.signal != "bm25":
            pieces.matrix(self.embedder(ctx), self.with_context)

    def scores(self, pieces: Pieces, question: str, ctx: CorpusContext) -> dict[int, float]:
        """Each ranked piece's score (by position in `pieces`); pieces absent are not ranked."""
        import numpy as np

        lexical: dict[int, float] = {}
        if self.signal != "dense":
            index = pieces.bm25(self.with_context)
            lexical = {int(i): s for i, s in index.search(question, len(pieces.ids))}
            if self.signal == "bm25":
                return lexical
        embedder = self.embedder(ctx)
        cosine = pieces.matrix(embedder, self.with_context) @ embedder.embed([question])[0]
        if self.signal == "dense":
            return {i: float(s) for i, s in enumerate(cosine)}
        if self.signal == "rrf":
            out: dict[int, float] = {}
            for ranking in (sorted(lexical, key=lambda i: -lexical[i]), np.argsort(-cosine, kind="stable")):
                for rank, i in enumerate(ranking):
                    out[int(i)] = out.get(int(i), 0.0) + 1.0 / (RRF_K + rank + 1)
            return out
        best = max(lexical.values(), default=0.0)
        dense = minmax(cosine)
        w = self.lexical_weight
        return {
            i: w * (lexical.get(i, 0.0) / best if best > 0 else 0.0) + (1.0 - w) * float(d)
            for i, d in enumerate(dense)
        }

    def run(self, case: Case, ctx: CorpusContext) -> Record:
        started = time.perf_counter()
        pieces = corpus_pieces(ctx)
        scored = self.scores(pieces, case.prompt(), ctx)
        order = sorted(scored, key=lambda i: (-scored[i], i))  # ties in document order
        ranked = [pieces.passage[i] for i in order]
        lengths = [pieces.tokens[i] for i in order]
        record = base_record(case, self.name)
        record.retrieved = list(dict.fromkeys(ranked[: self.k]))
        record.metrics = retrieval_metrics(case, ctx, ranked, k=self.k, budget=self.budget, lengths=lengths)
        record.tokens_read = sum(lengths[: self.k])
        record.wall_s = time.perf_counter() - started
        return record


def method_name(signal: str, with_context: bool) -> str:
    return f"flat-{signal}" + ("-ctx" if with_context else "")


def factories() -> dict[str, Any]:
    """Every flat method by name, for the registry (`methods._FACTORIES`)."""
    out: dict[str, Any] = {}
    for signal in SIGNALS:
        for with_context in (False, True):
            out[method_name(signal, with_context)] = lambda p, s=signal, c=with_context: FlatPiecesMethod(
                s, c, k=p.k, budget=p.budget
            )
    return out
