"""Methods under evaluation: each turns a question over a corpus into one `Record` of the same shape.

One record shape for every method is what makes the comparison honest: the same metrics, the same
token and call accounting, the same wall-clock measure, whether the method is a BM25 lookup or a
multi-call tree walk. Methods are registered by name (`register_method`); the command line picks
them with `--method bm25,walk`. The LLM methods live in `llm_methods.py` and register themselves here.

A method is anything with a `name` and `run(case, ctx) -> Record`. It may also have `prepare(ctx)`,
which the runner calls (and times separately, as setup) before a method's first question on a corpus:
indexing a corpus or building a tree is a per-corpus cost, not a per-question one.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from knowtree.errors import UserError
from knowtree.retrieve.bm25 import LexicalIndex
from knowtree_eval import metrics as m
from knowtree_eval.datasets import Case, Corpus

if TYPE_CHECKING:
    from knowtree.retrieve.vectors import VectorIndex
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

    def need_runtime(self) -> Runtime:
        if self.runtime is None:
            raise UserError("this method needs a model: run it through run_eval (it sets up the model)")
        return self.runtime

    def tokens(self, text: str) -> int:
        return m.count_tokens(text, self.tokenizer)

    def close(self) -> None:
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


# -- scoring shared by all methods -------------------------------------------------------------------


def evidence_labels(corpus: Corpus, ranked: Sequence[str], gold: Sequence[str]) -> list[str]:
    """Ranked passage ids as the gold sees them: a passage of a gold *document* counts as that document."""
    wanted = set(gold)
    out = []
    for pid in ranked:
        doc = corpus.passages[pid].doc if pid in corpus.passages else pid
        out.append(pid if pid in wanted else doc if doc in wanted else pid)
    return out


def retrieval_metrics(
    case: Case,
    ctx: CorpusContext,
    ranked: Sequence[str],
    *,
    k: int,
    budget: int,
    lengths: Sequence[int] | None = None,
) -> dict[str, float | None]:
    """hit rate@k, recall@k and recall within `budget` tokens, for a ranking of passage ids; plus the
    hit rate (`hit_b512`…) and whether every gold passage is in (`all_b512`…) within each of `BUDGETS`
    tokens. `lengths` are the tokens shown per ranked item when a method shows less than whole
    passages (pieces of them: `ranked` may then repeat a passage id)."""
    labels = evidence_labels(ctx.corpus, ranked, case.evidence)
    if lengths is None:
        lengths = [ctx.tokens(ctx.corpus.text(p)) for p in ranked]
    out: dict[str, float | None] = {
        "hit_rate": m.hit_at_k(labels, case.evidence, k),
        "recall": m.recall_at_k(labels, case.evidence, k),
        "recall_budget": m.recall_at_k(labels, case.evidence, m.within_budget(lengths, budget)),
    }
    for b in BUDGETS:
        n = m.within_budget(lengths, b)
        out[f"hit_b{b}"] = m.hit_at_k(labels, case.evidence, n)
        found = m.recall_at_k(labels, case.evidence, n)
        out[f"all_b{b}"] = None if found is None else float(found >= 1.0)
    return out


BUDGETS = (256, 512, 1024, 2048, 4096)


def read_metrics(case: Case, ctx: CorpusContext, read: Sequence[str]) -> dict[str, float | None]:
    """For methods that read passages (not a ranking): did what they read include the evidence?"""
    labels = evidence_labels(ctx.corpus, read, case.evidence)
    return {
        "hit_rate": m.hit_at_k(labels, case.evidence, len(labels)),
        "recall": m.recall_at_k(labels, case.evidence, len(labels)),
    }


def answer_metrics(case: Case, prediction: str | None) -> tuple[dict[str, float | None], str | None]:
    """For methods that answer: accuracy for multiple choice, else EM and token F1 (no answer = 0)."""
    if case.options and case.gold_letter:
        choice = m.extract_choice(prediction, case.options)
        return {"correct": float(choice == case.gold_letter)}, choice
    if case.answer is not None:
        return {"em": m.exact_match(prediction, case.answer), "f1": m.token_f1(prediction, case.answer)}, None
    return {}, None


def base_record(case: Case, method: str) -> Record:
    return Record(
        case_id=case.id,
        method=method,
        corpus=case.corpus,
        question=case.question,
        category=case.category,
        gold_answer=case.answer,
        gold_letter=case.gold_letter,
        evidence=list(case.evidence),
    )


# -- BM25 --------------------------------------------------------------------------------------------


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
            from knowtree_eval.runtime import answer_from_text

            runtime = ctx.need_runtime()
            with runtime.question("eval", f"{self.name}:{case.corpus}", case.question) as (client, run_id):
                text = "\n\n".join(f"[{i + 1}] {ctx.corpus.text(p)}" for i, p in enumerate(top))
                record.prediction = answer_from_text(client, case.prompt(), text)
                account(record, client, run_id)
            scores, record.choice = answer_metrics(case, record.prediction)
            record.metrics.update(scores)
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


def account(record: Record, client: Any, run_id: str) -> None:
    """Copy a question's LLM usage (from its client) into the record; the ledger run is the trace."""
    u = client.usage
    # a method's cost is what it asks for: calls the shared cache answered (another method, an
    # earlier run) still count, with the tokens they took when first made; `cached_calls` says how many
    record.llm_calls = u.calls + u.cached
    record.cached_calls = u.cached
    record.round_trips = u.calls + u.cached  # every method here makes its calls one after another
    record.input_tokens = u.input_tokens + u.cached_input_tokens
    record.output_tokens = u.output_tokens + u.cached_output_tokens
    record.cost_usd = round(u.cost_usd, 6)
    record.trace_id = run_id


# -- registry ----------------------------------------------------------------------------------------

MethodFactory = Callable[[MethodParams], Method]

_FACTORIES: dict[str, MethodFactory] = {
    "bm25": lambda p: BM25Method(k=p.k, budget=p.budget, answer=p.answer),
    "embedding": lambda p: EmbeddingMethod(k=p.k, budget=p.budget, answer=p.answer),
    "hybrid": lambda p: HybridMethod(k=p.k, budget=p.budget, answer=p.answer),
    "tree": lambda p: _tree_method(p),
    "nav": lambda p: _nav_method(p),
    "nav-judge": lambda p: _nav_method(p, judge_only=True),
}


def _nav_method(p: MethodParams, *, judge_only: bool = False) -> Method:
    from knowtree_eval.navmethod import nav_method

    return nav_method(p, judge_only=judge_only)


def _tree_method(p: MethodParams) -> Method:
    from knowtree_eval.treemethod import TreeMethod

    return TreeMethod(k=p.k, budget=p.budget)

# reserved names, with what they will be: asking for one now says it is not implemented yet
PLANNED: dict[str, str] = {}
_BUILTIN_LOADED = False


def _load_builtin() -> None:
    """Register the LLM methods (`llm_methods.py`) on first use: importing this module stays light."""
    global _BUILTIN_LOADED
    if not _BUILTIN_LOADED:
        _BUILTIN_LOADED = True
        from knowtree_eval import llm_methods

        llm_methods.register()


def register_method(name: str, factory: MethodFactory, *, replace: bool = False) -> None:
    """Make `name` selectable with `--method` (e.g. `register_method("walk", lambda p: WalkMethod(p))`)."""
    if name in _FACTORIES and not replace:
        raise ValueError(f"method {name!r} is already registered")
    _FACTORIES[name] = factory


def available_methods() -> list[str]:
    _load_builtin()
    return sorted(_FACTORIES)


def parse_methods(spec: str | Sequence[str]) -> list[str]:
    """Method names from "bm25,walk" or ["bm25", "walk"]: distinct names in order; each checked against the registry."""
    parts = spec.split(",") if isinstance(spec, str) else [p for s in spec for p in s.split(",")]
    names = list(dict.fromkeys(p.strip().lower() for p in parts if p.strip()))
    if not names:
        raise UserError(f"no method given (available: {', '.join(available_methods())})")
    for name in names:
        _check(name)
    return names


def _check(name: str) -> None:
    _load_builtin()
    if name in _FACTORIES:
        return
    available = ", ".join(available_methods())
    planned = [p for p in PLANNED if p not in _FACTORIES]
    if name in PLANNED:
        raise UserError(f"method {name!r} is not implemented yet (available: {available})")
    later = f"; planned: {', '.join(planned)}" if planned else ""
    raise UserError(f"unknown method {name!r} (available: {available}{later})")


def make_method(name: str, params: MethodParams | None = None) -> Method:
    _check(name)
    return _FACTORIES[name](params or MethodParams())
