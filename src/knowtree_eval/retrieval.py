"""The retrieval baselines: BM25, dense embeddings and their fusion, top-k over the corpus passages."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from knowtree.retrieve.bm25 import LexicalIndex
from knowtree_eval import metrics as m
from knowtree_eval.base import CorpusContext, Record
from knowtree_eval.datasets import Case
from knowtree_eval.scoring import BUDGETS, base_record, read_text, retrieval_metrics, score_answer

if TYPE_CHECKING:
    from knowtree.retrieve.vectors import VectorIndex


@dataclass
class BM25Method:
    """Lexical top-k retrieval: the floor any memory method has to clear.

    It reads the top `k` passages (tokens read = their tokens). It also ranks deeper, until `budget`
    tokens are filled, to report recall at that budget. With `answer=True` (a run given `--model`)
    the same model then answers from those `k` passages, so accuracy sits beside the other methods';
    without, it is LLM-free.
    """

    k: int = 5
    budget: int = 2048
    depth: int = 50
    answer: bool = False
    name: str = "bm25"

    def index(self, ctx: CorpusContext) -> LexicalIndex | VectorIndex:
        return ctx.lexical()

    def prepare(self, ctx: CorpusContext) -> None:
        self.index(ctx)

    def run(self, case: Case, ctx: CorpusContext) -> Record:
        started = time.perf_counter()
        index = self.index(ctx)
        depth = max(self.k, self.depth)
        while True:
            ranked = [pid for pid, _ in index.search(case.question, depth)]
            lengths = [ctx.tokens(ctx.corpus.text(p)) for p in ranked]
            # rank deeper while everything found still fits the largest budget and more may exist
            if len(ranked) < depth or m.within_budget(lengths, max(self.budget, *BUDGETS)) < len(ranked):
                break
            depth *= 2
        top = ranked[: self.k]
        record = base_record(case, self.name)
        record.retrieved = top
        record.metrics = retrieval_metrics(case, ctx, ranked, k=self.k, budget=self.budget)
        record.tokens_read = sum(lengths[: len(top)])
        if self.answer:
            text = "\n\n".join(f"[{i + 1}] {ctx.corpus.text(p)}" for i, p in enumerate(top))
            read_text(record, case, ctx, text)
            score_answer(record, case)
        record.wall_s = time.perf_counter() - started
        return record


@dataclass
class EmbeddingMethod(BM25Method):
    """Dense top-k retrieval with the offline embedder (same reading and budget rules as BM25)."""

    name: str = "embedding"

    def index(self, ctx: CorpusContext) -> LexicalIndex | VectorIndex:
        return ctx.vectors()


@dataclass
class HybridMethod(BM25Method):
    """BM25 and embedding rankings fused by reciprocal rank (same reading and budget rules)."""

    name: str = "hybrid"

    def index(self, ctx: CorpusContext) -> Any:
        from knowtree.retrieve.hybrid import HybridIndex

        return HybridIndex(ctx.lexical(), ctx.vectors())
