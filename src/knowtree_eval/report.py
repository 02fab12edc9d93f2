"""What a run prints and writes for people: the headline lines, summary.md, the equivalent command."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from knowtree_eval.results import RESULTS


def _build_requests(stats: dict[str, Any]) -> int:
    """Requests made to build a method's per-corpus structures, whichever method's build warmed the cache
    (walk, flat, memwalker and search share one tree)."""
    calls = stats.get("setup_calls") or {}
    return int(calls.get("calls", 0)) + int(calls.get("cached", 0))


def _f(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def headline(summary: dict[str, Any]) -> list[str]:
    """The lines printed when a run ends: accuracy / F1, hit rate, recall, tokens read, calls, time."""
    k, budget = summary["k"], summary["budget"]
    lines = []
    for name, s in summary["methods"].items():
        parts = []
        if s["accuracy"] is not None:
            parts.append(f"accuracy: {s['accuracy']:.3f} ({s['accuracy_n']} questions)")
            if s.get("accuracy_calibrated") is not None:
                parts.append(f"letter bias divided out: {s['accuracy_calibrated']:.3f}")
        if s["f1"] is not None:
            parts.append(f"EM: {s['em']:.3f}, F1: {s['f1']:.3f} ({s['answer_n']} questions)")
        if s["judged"] is not None:
            parts.append(f"judged accuracy: {s['judged']:.3f} ({s['judged_n']} questions)")
        if s["hit_rate"] is not None:
            parts.append(f"hit rate@{k}: {s['hit_rate']:.3f} ({s['evidence_n']} questions)")
            parts.append(f"recall@{k}: {_f(s['recall'])}")
            if s["recall_budget"] is not None:  # ranking methods only
                parts.append(f"recall@{budget} tokens: {s['recall_budget']:.3f}")
        else:
            parts.append(f"hit rate@{k}: n/a (no evidence ids in this dataset)")
        parts.append(f"tokens read: {_f(s['tokens_read_mean'], 0)}/question")
        setup_calls = _build_requests(s)
        parts.append(f"LLM calls: {s['llm_calls']}" + (f" + {setup_calls} to build" if setup_calls else ""))
        parts.append(f"wall: {s['wall_s']:.1f}s + {s['setup_s']:.1f}s setup")
        if s["errors"]:
            parts.append(f"errors: {s['errors']}")
        lines.append(f"{name}: " + ", ".join(parts))
    return lines


def render_summary(summary: dict[str, Any], info: dict[str, Any] | None = None) -> str:
    """summary.md: the comparison table, per-category tables, the command and the run's provenance."""
    k, budget = summary["k"], summary["budget"]
    info = info or {}
    v = info.get("versions", {})
    ds = info.get("dataset", {})
    lines = [
        f"# knowtree eval: {summary['kind']}",
        "",
        "```bash",
        summary["command"],
        "```",
        "",
        f"- dataset: `{summary['path']}` — {summary['questions']} question(s), "
        f"{ds.get('corpora', '?')} corpus/corpora, {ds.get('passages', '?')} passages",
        f"- k = {k}, token budget = {budget} (tokens ≈ characters / 4 unless a tokenizer was given), "
        f"model: {summary.get('model') or 'none'}, seed: {summary.get('seed')}",
        f"- knowtree {v.get('knowtree', '?')}, Python {v.get('python', '?')}, SQLite {v.get('sqlite', '?')}; "
        f"started {info.get('started', '?')}, finished {info.get('finished', '?')}",
    ]
    lines += [f"- note: {n}" for n in summary.get("notes", [])]
    header = (
        f"| method | questions | accuracy | EM | F1 | judged | hit rate@{k} | recall@{k} | recall@{budget} tok "
        "| mean tokens read | LLM calls (+ build) | round trips/q | input+output tokens | cost $ "
        "| wall s | setup s | errors |"
    )
    lines += ["", header, "|" + "---|" * 17]
    for name, s in summary["methods"].items():
        build = _build_requests(s)
        lines.append(
            f"| {name} | {s['questions']} | {_f(s['accuracy'])} | {_f(s['em'])} | {_f(s['f1'])} "
            f"| {_f(s['judged'])} | {_f(s['hit_rate'])} | {_f(s['recall'])} | {_f(s['recall_budget'])} "
            f"| {_f(s['tokens_read_mean'], 0)} | {s['llm_calls']}{f' (+{build})' if build else ''} "
            f"| {_f(s['round_trips_mean'], 1)} | {s['input_tokens'] + s['output_tokens']:,} "
            f"| {s['cost_usd']:.4f} | {s['wall_s']:.1f} | {s['setup_s']:.1f} | {s['errors']} |"
        )
    cut = {n: s["cut"] for n, s in summary["methods"].items() if s.get("cut")}
    for name, share in cut.items():
        lines.append(
            f"\n{name}: on average {share:.1%} of each corpus did not fit the model's window and was cut."
        )
    plots = summary.get("plots") or {}
    if plots.get("files"):
        lines += ["", *[f"![{p}]({p})" for p in plots["files"]]]
    if plots.get("note"):
        lines += ["", f"Plots: {plots['note']}"]
    for name, s in summary["methods"].items():
        cats = s.get("by_category")
        if not cats:
            continue
        lines += [
            "",
            f"## {name} by category",
            "",
            "| category | questions | accuracy | F1 | judged | hit rate | recall | mean tokens read | LLM calls |",
            "|" + "---|" * 9,
        ]
        for c, cs in cats.items():
            lines.append(
                f"| {c} | {cs['questions']} | {_f(cs['accuracy'])} | {_f(cs['f1'])} | {_f(cs['judged'])} "
                f"| {_f(cs['hit_rate'])} | {_f(cs['recall'])} | {_f(cs['tokens_read_mean'], 0)} "
                f"| {cs['llm_calls']} |"
            )
    lines += [
        "",
        "Metrics: accuracy = multiple-choice letter correct; EM / F1 = SQuAD-normalised exact match and "
        "token F1; judged = the LLM judge's verdict (fixed prompt `prompts/judge.txt`); hit rate@k = any gold "
        f"evidence among the passages read (top {k} for bm25/embedding; for the other methods whatever they "
        "read: the leaves a walk opened, the window for fulltext, the passages within the budget for raptor); "
        "recall@k = share of the gold "
        f"evidence among them; recall@{budget} tok = share of gold evidence in the ranked passages that fit, "
        f"whole and in order, in {budget} tokens. LLM calls exclude cache hits; (+ build) = calls to build "
        "trees/summaries for the corpus, once. '–' = not applicable. Per-question lines: "
        f"`{RESULTS}` (trace_id = the ledger run in knowtree.db).",
        "",
    ]
    return "\n".join(lines)


def equivalent_command(
    kind: str,
    path: str | Path,
    methods: Sequence[str],
    out: str | Path,
    limit: int | None,
    model: str | None,
    seed: int,
    k: int,
    budget: int,
    pages: str | Path | None,
    db: str | Path | None,
    judge: str | None = None,
    corpora: int | None = None,
    per_corpus: int | None = None,
    corpus: Sequence[str] = (),
    *,
    skip: int | None = None,
    nav: str | None = None,
    choice_reads: int = 1,
) -> str:
    """The `knowtree eval` command line that reproduces this run (also for runs started from Python)."""
    args = ["knowtree", "eval", kind, str(path), "--method", ",".join(methods)]
    if pages:
        args += ["--pages", str(pages)]
    if model:
        args += ["--model", model]
    if judge:
        args += ["--judge", judge]
    if corpus:
        args += ["--corpus", ",".join(corpus)]
    if corpora is not None:
        args += ["--corpora", str(corpora)]
    if per_corpus is not None:
        args += ["--per-corpus", str(per_corpus)]
    if skip:
        args += ["--skip", str(skip)]
    if limit is not None:
        args += ["--limit", str(limit)]
    if nav:
        args += ["--nav", nav]
    if choice_reads != 1:
        args += ["--choice-reads", str(choice_reads)]
    args += ["--k", str(k), "--budget", str(budget)]
    if seed:
        args += ["--seed", str(seed)]
    if db:
        args += ["--db", str(db)]
    args += ["--out", str(out)]
    return shlex.join(args)
