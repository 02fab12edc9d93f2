"""What every evaluation method shares: the `Method` protocol, the `Record` it returns, the run-wide
`MethodParams` its factory gets, and the `CorpusContext` it runs in.

One record shape for every method is what makes the comparison honest: the same metrics, the same
token and call accounting, the same wall-clock measure, whether the method is a BM25 lookup or a
multi-call tree walk.

A method is anything with a `name` and `run(case, ctx) -> Record`. It may also have `prepare(ctx)`,
which the runner calls (and times separately, as setup) before a method's first question on a corpus:
indexing a corpus or building a tree is a per-corpus cost, not a per-question one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from knowtree.errors import UserError
from knowtree.retrieve.bm25 import LexicalIndex
from knowtree_eval import metrics as m
from knowtree_eval.datasets import Case, Corpus

if TYPE_CHECKING:
    from knowtree.retrieve.vectors import VectorIndex
    from knowtree.types import Usage
    from knowtree_eval.runtime import Runtime


class Record(BaseModel):
    """What one method did on one question: one line of results.jsonl."""

    case_id: str
    method: str
    corpus: str
    question: str
    category: str | None = None
    gold_answer: str | None = None
    gold_letter: str | None = None
    evidence: list[str] = Field(default_factory=list)
    prediction: str | None = None  # the method's answer (None: it gave none, or it does not answer)
    choice: str | None = None  # the option letter read from the prediction (multiple choice)
    # multiple choice: the reader's probability of each letter where it wrote its own (`read_answer`)
    choice_probs: dict[str, float] | None = None
    # multiple choice read more than once (`--choice-reads`): each reading's letter probabilities, by
    # the options' own letters; `choice_probs` is their mean, `prediction` its best option
    choice_reads: list[dict[str, float]] | None = None
    status: str | None = None  # e.g. a walk's "complete" / "partial" / "none"
    retrieved: list[str] = Field(default_factory=list)  # passage ids the method read, best first
    metrics: dict[str, float | None] = Field(default_factory=dict)
    tokens_read: int = 0  # tokens of corpus text the method read (retrieved passages, leaves…)
    llm_calls: int = 0  # model requests made for this question (including those the cache answered)
    cached_calls: int = 0  # of those, answered from the cache (same tokens counted, no model time)
    round_trips: int = 0  # sequential model requests (latency floor), cached ones included
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    trace_id: str | None = None  # where the full trace lives (e.g. the ledger run id of a walk)
    judge_reason: str | None = None  # the judge's reason, when a judge graded this answer
    error: str | None = None  # a model failure on this question; the runner retries it on resume


@dataclass
class MethodParams:
    """Run-wide settings every method factory receives."""

    k: int = 5
    budget: int = 2048
    model: str | None = None
    seed: int = 0
    answer: bool = False  # retrieval methods also answer with the model (set when a model is given)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CorpusContext:
    """What methods share about one corpus: the passages, lazily built indexes, token counting.

    `db` is where indexes live (":memory:" or an SQLite file, where an unchanged corpus is not
    re-indexed on the next run). `runtime` is the model side (None for LLM-free runs);
    `setup_usage` collects the LLM usage of per-corpus preparation (tree builds) by method.
    """

    corpus: Corpus
    db: str = ":memory:"
    tokenizer: m.Tokenizer | None = None
    runtime: Runtime | None = None
    embedder: str = "default"
    setup_usage: dict[str, Any] = field(default_factory=dict)
    #: what several methods build once per corpus and share (e.g. the flat methods' pieces); a value
    #: with a `close()` is closed with the context
    shared: dict[str, Any] = field(default_factory=dict)
    _lexical: LexicalIndex | None = field(default=None, repr=False)
    _vectors: VectorIndex | None = field(default=None, repr=False)

    @property
    def index_name(self) -> str:
        return "c_" + hashlib.sha1(self.corpus.id.encode("utf-8")).hexdigest()[:16]

    def lexical(self) -> LexicalIndex:
        if self._lexical is None:
            index = LexicalIndex(self.db, name=self.index_name)
            index.ensure(list(self.corpus.passages.values()), self.corpus.fingerprint())
            self._lexical = index
        return self._lexical

    def vectors(self) -> VectorIndex:
        if self._vectors is None:
            from knowtree.retrieve.vectors import VectorIndex

            index = VectorIndex(self.db, name=self.index_name, embedder=self.embedder)
            index.ensure(list(self.corpus.passages.values()), self.corpus.fingerprint())
            self._vectors = index
        return self._vectors

    def charge_setup(self, method: str, usage: Usage) -> None:
        """Add the LLM usage of a method's per-corpus preparation (a tree build) to `setup_usage`."""
        total = self.setup_usage.setdefault(method, {"calls": 0, "cached": 0, "tokens": 0})
        total["calls"] += usage.calls
        total["cached"] += usage.cached
        total["tokens"] += usage.input_tokens + usage.output_tokens

    def need_runtime(self) -> Runtime:
        if self.runtime is None:
            raise UserError("this method needs a model: run it through run_eval (it sets up the model)")
        return self.runtime

    def tokens(self, text: str) -> int:
        return m.count_tokens(text, self.tokenizer)

    def close(self) -> None:
        for value in self.shared.values():
            closer = getattr(value, "close", None)
            if closer is not None:
                closer()
        self.shared.clear()
        if self._lexical is not None:
            self._lexical.close()
            self._lexical = None
        if self._vectors is not None:
            self._vectors.close()
            self._vectors = None


@runtime_checkable
class Method(Protocol):
    name: str

    def run(self, case: Case, ctx: CorpusContext) -> Record: ...


MethodFactory = Callable[[MethodParams], Method]
