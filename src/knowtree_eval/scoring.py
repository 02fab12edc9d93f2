"""Filling a `Record`: the metrics every method is scored with, its reader's answer, its LLM usage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowtree_eval import metrics as m
from knowtree_eval.base import CorpusContext, Record
from knowtree_eval.datasets import Case, Corpus
from knowtree_eval.runtime import read_answer


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


def read_into(record: Record, client: Any, case: Case, text: str, reads: int = 1) -> None:
    """`runtime.read_answer` into `record`: its prediction, letter probabilities and readings."""
    record.prediction, record.choice_probs, record.choice_reads = read_answer(client, case, text, reads)


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


def read_text(record: Record, case: Case, ctx: CorpusContext, text: str) -> None:
    """The shared reader over `text` (one question's run in the ledger, `record.method`'s), its answer
    and usage into `record`; `score_answer` after the method has set `record.metrics`."""
    runtime = ctx.need_runtime()
    with runtime.question("eval", f"{record.method}:{case.corpus}", case.question) as (client, run_id):
        read_into(record, client, case, text, runtime.choice_reads)
        account(record, client, run_id)


def score_answer(record: Record, case: Case) -> None:
    """The answer's metrics (`answer_metrics`) added to `record.metrics`, its letter to `record.choice`."""
    scores, record.choice = answer_metrics(case, record.prediction)
    record.metrics.update(scores)
