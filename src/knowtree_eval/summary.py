"""Aggregates: per-method (and per-category) statistics from result records, and setup totals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowtree_eval.base import Record
from knowtree_eval.metrics import mean
from knowtree_eval.scoring import BUDGETS


def setup_totals(
    by: dict[str, dict[str, Any]], legacy: dict[str, float]
) -> tuple[dict[str, float], dict[str, dict[str, int]]]:
    """Per-method setup seconds and build calls, summed over corpora (runs before `setup_by`: legacy seconds)."""
    seconds: dict[str, float] = {
        m: v for m, v in legacy.items() if not any(k.startswith(m + "|") for k in by)
    }
    calls: dict[str, dict[str, int]] = {}
    for key, entry in by.items():
        method = key.split("|", 1)[0]
        seconds[method] = seconds.get(method, 0.0) + float(entry.get("s", 0.0))
        for name in ("calls", "cached", "tokens"):
            if name in entry:
                total = calls.setdefault(method, {})
                total[name] = total.get(name, 0) + int(entry[name])
    return seconds, calls


def _stats(records: Sequence[Record]) -> dict[str, Any]:
    def metric(name: str) -> float | None:
        return mean(r.metrics.get(name) for r in records)

    def count(name: str) -> int:
        return sum(1 for r in records if r.metrics.get(name) is not None)

    return {
        "questions": len(records),
        "errors": sum(1 for r in records if r.error),
        "accuracy": metric("correct"),
        "accuracy_calibrated": calibrated_accuracy(records),
        "accuracy_n": count("correct"),
        "em": metric("em"),
        "f1": metric("f1"),
        "answer_n": count("f1"),
        "judged": metric("judged"),
        "judged_n": count("judged"),
        "cut": metric("cut"),
        "hit_rate": metric("hit_rate"),
        "recall": metric("recall"),
        "recall_budget": metric("recall_budget"),
        "evidence_n": count("hit_rate"),
        "tokens_read_mean": mean(r.tokens_read for r in records),
        "tokens_read_total": sum(r.tokens_read for r in records),
        "llm_calls": sum(r.llm_calls for r in records),
        "llm_calls_mean": mean(r.llm_calls for r in records),
        "cached_calls": sum(r.cached_calls for r in records),
        "round_trips_mean": mean(r.round_trips for r in records),
        "cost_usd": sum(r.cost_usd for r in records),
        "input_tokens": sum(r.input_tokens for r in records),
        "output_tokens": sum(r.output_tokens for r in records),
        "wall_s": sum(r.wall_s for r in records),
        "wall_s_mean": mean(r.wall_s for r in records),
    }


def calibrated_accuracy(records: Sequence[Record]) -> float | None:
    """Multiple choice: the accuracy when each answer's letter is re-read with the reader's lean
    towards some letters divided out: argmax over letters of p(letter) / mean p(letter), the mean
    over these records' distributions (`Record.choice_probs`; no gold letter is used). A record
    without a distribution keeps its letter. None when no record has one."""
    scored = [r for r in records if r.metrics.get("correct") is not None]
    dists = [r.choice_probs for r in scored if r.choice_probs]
    if not dists:
        return None
    letters = sorted({k for d in dists for k in d})
    prior = {k: max(sum(d.get(k, 0.0) for d in dists) / len(dists), 1e-9) for k in letters}
    right = 0
    for r in scored:
        d = r.choice_probs
        pick = max(d, key=lambda k: d[k] / prior[k]) if d else r.choice
        right += pick == r.gold_letter
    return right / len(scored)


def summarize(
    records: Sequence[Record],
    methods: Sequence[str],
    *,
    k: int,
    budget: int,
    setup: dict[str, float] | None = None,
    setup_calls: dict[str, dict[str, int]] | None = None,
) -> dict[str, Any]:
    """Per-method aggregates (and per category when records have one) from result records."""
    out: dict[str, Any] = {}
    for name in methods:
        mine = [r for r in records if r.method == name]
        stats = _stats(mine)
        stats["setup_s"] = (setup or {}).get(name, 0.0)
        stats["setup_calls"] = dict((setup_calls or {}).get(name, {}))
        stats["hit_by_budget"] = {
            b: mean(r.metrics.get(f"hit_b{b}") for r in mine)
            for b in BUDGETS
            if any(r.metrics.get(f"hit_b{b}") is not None for r in mine)
        }
        stats["all_hit_by_budget"] = {
            b: mean(r.metrics.get(f"all_b{b}") for r in mine)
            for b in BUDGETS
            if any(r.metrics.get(f"all_b{b}") is not None for r in mine)
        }
        categories = sorted({r.category for r in mine if r.category})
        if categories:
            stats["by_category"] = {c: _stats([r for r in mine if r.category == c]) for c in categories}
        out[name] = stats
    return {"methods": out, "k": k, "budget": budget}


def headline_numbers(s: dict[str, Any]) -> dict[str, Any]:
    keys = ("questions", "accuracy", "em", "f1", "judged", "hit_rate", "recall", "recall_budget")
    return {k: s[k] for k in (*keys, "tokens_read_mean", "llm_calls", "wall_s", "setup_s", "setup_calls")}
