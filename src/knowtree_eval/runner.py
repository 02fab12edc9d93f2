"""Run methods over a dataset, write one JSONL line per (method, question), summarise, resume.

Output directory:

- `results.jsonl`: one `Record` per line, appended and flushed as each question finishes, so an
  interrupted run loses at most the question in flight;
- `run.json`: what was run (dataset, methods, parameters, seed, model), with which versions, and
  each session's start/finish;
- `summary.md`: one row per method (plus per-category tables when the dataset has categories) and
  the exact command that reproduces it.

Resume: running again into the same directory with the same parameters (kind, path, k, budget,
model, seed) skips every (method, question) already in results.jsonl; lines recording a model error
are retried. Changing `--limit` or adding a method is fine (only the missing pairs run); changing a
parameter that alters results is refused rather than mixing two runs in one file.
"""

from __future__ import annotations

import contextlib
import json
import platform
import shlex
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from knowtree.errors import ModelError, UserError
from knowtree_eval.datasets import Case, Dataset, default_pages_path, load_dataset
from knowtree_eval.methods import (
    BUDGETS,
    CorpusContext,
    Method,
    MethodParams,
    Record,
    answer_metrics,
    base_record,
    make_method,
    parse_methods,
)
from knowtree_eval.metrics import Tokenizer, mean
from knowtree_eval.runtime import Runtime

RESULTS = "results.jsonl"
RUN = "run.json"
SUMMARY = "summary.md"
SUMMARY_JSON = "summary.json"

ProgressSink = Callable[[str], None]
TickSink = Callable[[int, int, str], None]  # (questions done, total, metrics so far)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def versions() -> dict[str, str]:
    try:
        from importlib.metadata import version

        kt = version("knowtree")
    except Exception:  # not installed as a distribution (e.g. run from a source tree)
        from knowtree import __version__ as kt
    out = {
        "knowtree": kt,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
    }
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("llama-cpp-python", "tokenlearn-static-model", "openai", "anthropic"):
        with contextlib.suppress(PackageNotFoundError):
            out[dist] = version(dist)
    return out


def run_eval(
    kind: str,
    path: str | Path,
    methods: str | Sequence[str],
    out_dir: str | Path,
    limit: int | None = None,
    model: str | None = None,
    seed: int = 0,
    *,
    k: int = 5,
    budget: int = 2048,
    pages: str | Path | None = None,
    db: str | Path | None = None,
    tokenizer: Tokenizer | None = None,
    progress: bool | ProgressSink = True,
    progress_every: float = 5.0,
    argv: Sequence[str] | None = None,
    judge: str | None = None,
    corpora: int | None = None,
    per_corpus: int | None = None,
    corpus: Sequence[str] | str | None = None,
    embedder: str = "default",
    model_object: Any = None,
    judge_object: Any = None,
    on_tick: TickSink | None = None,
) -> dict[str, Any]:
    """Evaluate `methods` ("bm25" or "bm25,walk", or a list) on a dataset; returns the summary dict.

    `db` keeps retrieval indexes in an SQLite file across runs (default: in memory). `tokenizer`
    counts tokens (default: characters / 4). `progress` prints a line to stderr every
    `progress_every` seconds (or pass a callable to receive the lines); `on_tick(done, total, text)`
    is called after every question (the CLI's progress bar). `argv` is recorded in run.json when
    called from the command line.

    Subsets: `corpora` keeps the questions of the first N corpora (QuALITY articles, LoCoMo
    conversations, filings), `corpus` only the named ones ("conv-30" or a list), `per_corpus` the first N
    questions of each, `limit` the first N overall.

    The model side: LLM methods (walk, flat, memwalker, fulltext, raptor) use `model` (a model
    string; `model_object`, a `Model`, wins); retrieval methods (bm25, embedding) also answer with it
    when a model is given. The LLM cache, ledger and trees live in `OUT/knowtree.db`, so a rerun is
    answered from the cache. `judge` ("same" or a model string) adds a judged accuracy for
    free-form answers (fixed prompt: `prompts/judge.txt`).
    """
    if k < 1:
        raise UserError(f"k must be at least 1, got {k}")
    if budget < 1:
        raise UserError(f"the token budget must be at least 1, got {budget}")
    names = parse_methods(methods)
    kind = kind.lower()
    pages_path = None
    if kind == "financebench":
        pages_path = Path(pages) if pages else default_pages_path(path)
    dataset = load_dataset(kind, path, pages=pages_path)
    names_wanted = [corpus] if isinstance(corpus, str) else list(corpus or [])
    names_wanted = [n.strip() for c in names_wanted for n in c.split(",") if n.strip()]
    _subset(dataset, corpora=corpora, per_corpus=per_corpus, limit=limit, names=names_wanted)
    has_model = model is not None or model_object is not None
    params = MethodParams(k=k, budget=budget, model=model, seed=seed, answer=has_model)
    runners = [make_method(n, params) for n in names]

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    key = {
        "kind": kind,
        "path": str(Path(path).resolve()),
        "pages": str(pages_path.resolve()) if pages_path else None,
        "k": k,
        "budget": budget,
        "model": model,
        "seed": seed,
        "tokens": getattr(tokenizer, "__name__", "tokenizer") if tokenizer else "chars/4",
        "judge": judge,
        "embedder": embedder,
    }
    info = _previous_run(out, key)
    done, unreadable = _load_records(out / RESULTS)
    session: dict[str, Any] = {
        "started": _now(),
        "methods": names,
        "limit": limit,
        "corpora": corpora,
        "per_corpus": per_corpus,
        "corpus": names_wanted or None,
        "argv": list(argv) if argv is not None else None,
        "status": "running",
    }
    command = equivalent_command(
        kind,
        path,
        names,
        out,
        limit,
        model,
        seed,
        k,
        budget,
        pages,
        db,
        judge,
        corpora,
        per_corpus,
        names_wanted,
    )
    info = info or {"started": session["started"], "sessions": [], "setup_s": {}}
    info.update(
        {
            "kind": kind,
            "path": str(path),
            "methods": sorted(set(info.get("methods", [])) | set(names)),
            "parameters": {
                **key,
                "limit": limit,
                "corpora": corpora,
                "per_corpus": per_corpus,
                "corpus": names_wanted or None,
                "db": str(db) if db else None,
            },
            "resume_key": key,
            "seed": seed,
            "model": model,
            "versions": versions(),
            "command": command,
            "dataset": {
                "questions": len(dataset.cases),
                "corpora": len(dataset.corpora),
                "passages": dataset.passages,
                "notes": dataset.notes,
            },
        }
    )
    info["sessions"].append(session)
    _write_json(out / RUN, info)
    runtime = Runtime(
        db=str(out / "knowtree.db"),
        model=model,
        model_object=model_object,
        judge=judge,
        judge_object=judge_object,
    )

    sink: ProgressSink | None = (_stderr if progress is True else progress) or None
    # corpus by corpus, then method by method: a corpus is indexed/built once, and one method's
    # questions run back to back (a local model keeps the shared prompt prefix in its KV cache)
    by_corpus: dict[str, list[Case]] = {}
    for case in dataset.cases:
        by_corpus.setdefault(case.corpus, []).append(case)
    pending = [
        (case, method)
        for cases in by_corpus.values()
        for method in runners
        for case in cases
        if (method.name, case.id) not in done or done[(method.name, case.id)].error is not None
    ]
    if sink:
        total = len(dataset.cases) * len(runners)
        again = f"; {total - len(pending)} already in {out / RESULTS}" if total != len(pending) else ""
        if unreadable:
            again += f"; {unreadable} unreadable line(s) there ignored"
        sink(
            f"eval {kind}: {len(dataset.cases)} question(s) × {len(runners)} method(s), "
            f"{len(pending)} to run{again}"
        )
    setup: dict[str, dict[str, Any]] = info.setdefault("setup_by", {})
    meter = _Progress(len(pending), sink, progress_every, k, on_tick)
    try:
        _execute(pending, dataset, out / RESULTS, done, setup, db, tokenizer, meter, runtime, embedder)
        if has_model:
            session["model_id"] = runtime.model_id
    except BaseException as exc:
        session["status"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"failed: {exc}"[:300]
        session["finished"] = _now()
        _write_json(out / RUN, info)
        raise
    finally:
        runtime.close()
    records = [done[(m.name, c.id)] for m in runners for c in dataset.cases if (m.name, c.id) in done]
    setup_s, setup_calls = _setup_totals(setup, info.get("setup_s", {}))
    info["setup_s"], info["setup_calls"] = setup_s, setup_calls
    summary = summarize(records, names, k=k, budget=budget, setup=setup_s, setup_calls=setup_calls)
    summary.update(
        {
            "kind": kind,
            "path": str(path),
            "out_dir": str(out),
            "questions": len(dataset.cases),
            "k": k,
            "budget": budget,
            "model": model,
            "seed": seed,
            "command": command,
            "notes": dataset.notes,
            "judge": judge,
        }
    )
    from knowtree_eval.plots import write_plots

    summary["plots"] = write_plots(summary, out)
    session["status"] = "ok"
    session["finished"] = _now()
    info["finished"] = session["finished"]
    info["status"] = "ok"
    info["summary"] = {n: _headline_numbers(s) for n, s in summary["methods"].items()}
    _write_json(out / RUN, info)
    (out / SUMMARY).write_text(render_summary(summary, info), encoding="utf-8")
    _write_json(out / SUMMARY_JSON, summary)
    return summary


# -- execution ---------------------------------------------------------------------------------------


def _execute(
    pending: list[tuple[Case, Method]],
    dataset: Dataset,
    results: Path,
    done: dict[tuple[str, str], Record],
    setup: dict[str, dict[str, Any]],
    db: str | Path | None,
    tokenizer: Tokenizer | None,
    meter: _Progress,
    runtime: Runtime,
    embedder: str,
) -> None:
    left: dict[str, int] = {}
    for case, _ in pending:
        left[case.corpus] = left.get(case.corpus, 0) + 1
    contexts: dict[str, CorpusContext] = {}
    prepared: set[tuple[str, str]] = set()
    with results.open("a+", encoding="utf-8") as f:
        f.seek(0, 2)
        if f.tell() > 0:
            f.seek(f.tell() - 1)
            if f.read(1) != "\n":  # a line cut short by a kill: end it so the next one parses
                f.write("\n")
        try:
            for case, method in pending:
                ctx = contexts.get(case.corpus)
                if ctx is None:
                    ctx = contexts[case.corpus] = CorpusContext(
                        dataset.corpora[case.corpus],
                        db=str(db) if db else ":memory:",
                        tokenizer=tokenizer,
                        runtime=runtime,
                        embedder=embedder,
                    )
                prepare = getattr(method, "prepare", None)
                if prepare is not None and (method.name, case.corpus) not in prepared:
                    started = time.perf_counter()
                    meter.note(f"{method.name}: preparing {case.corpus}")
                    prepare(ctx)
                    prepared.add((method.name, case.corpus))
                    # the first measurement of a (method, corpus) build is its cost; a resumed run that
                    # prepares again from the cache must not count it twice
                    key = f"{method.name}|{case.corpus}"
                    if key not in setup:
                        usage = ctx.setup_usage.get(method.name, {})
                        setup[key] = {"s": round(time.perf_counter() - started, 3), **usage}
                    ctx.setup_usage.clear()
                record = _run_one(method, case, ctx)
                _judge(record, case, runtime)
                f.write(record.model_dump_json() + "\n")
                f.flush()
                done[(method.name, case.id)] = record
                meter.tick(record)
                left[case.corpus] -= 1
                if left[case.corpus] == 0:  # the corpus is finished: free its indexes now
                    contexts.pop(case.corpus).close()
        finally:
            for ctx in contexts.values():
                ctx.close()
    meter.finish()


def _setup_totals(
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


def _subset(
    dataset: Dataset,
    *,
    corpora: int | None,
    per_corpus: int | None,
    limit: int | None,
    names: Sequence[str] = (),
) -> None:
    """Keep a named subset of the questions: named corpora, the first N corpora, N per corpus, N overall."""
    for name, value in (("--corpora", corpora), ("--per-corpus", per_corpus), ("--limit", limit)):
        if value is not None and value < 0:
            raise UserError(f"{name} must be 0 or more, got {value}")
    cases = dataset.cases
    if names:
        unknown = [n for n in names if n not in dataset.corpora]
        if unknown:
            known = ", ".join(list(dataset.corpora)[:12])
            raise UserError(f"no corpus named {', '.join(unknown)} in {dataset.path} (corpora: {known})")
        cases = [c for c in cases if c.corpus in names]
    if corpora is not None:
        keep = list(dict.fromkeys(c.corpus for c in cases))[:corpora]
        cases = [c for c in cases if c.corpus in keep]
    if per_corpus is not None:
        seen: dict[str, int] = {}
        kept = []
        for c in cases:
            seen[c.corpus] = seen.get(c.corpus, 0) + 1
            if seen[c.corpus] <= per_corpus:
                kept.append(c)
        cases = kept
    if limit is not None:
        cases = cases[:limit]
    dataset.cases = cases


def _judge(record: Record, case: Case, runtime: Runtime) -> None:
    """A judged verdict for a free-form answer when the run has a judge; its calls are not the method's."""
    kt = runtime.judge_kt()
    if kt is None or record.error or case.options or case.answer is None:
        return
    if record.prediction is None and record.llm_calls == 0 and record.cached_calls == 0:
        return  # an LLM-free retrieval record: nothing was answered, nothing to judge
    from knowtree_eval.judge import judge_answer

    run_id = kt.store.start_run("judge", record.method, detail=case.question[:500])
    client = kt.client(run_id)
    try:
        verdict = judge_answer(client, case.question, case.answer, record.prediction)
    except ModelError as exc:
        kt.store.finish_run(run_id, "failed")
        record.metrics["judged"] = None
        record.error = f"judge: {type(exc).__name__}: {exc}"[:500]
        return
    kt.store.finish_run(run_id, "ok")
    record.metrics["judged"] = float(verdict.correct)
    record.judge_reason = verdict.reason[:300]


def _run_one(method: Method, case: Case, ctx: CorpusContext) -> Record:
    """One question; a model failure becomes a recorded error (retried on resume), not a crash."""
    started = time.perf_counter()
    try:
        return method.run(case, ctx)
    except ModelError as exc:
        record = base_record(case, method.name)
        record.metrics, _ = answer_metrics(case, None)
        record.error = f"{type(exc).__name__}: {exc}"[:500]
        record.wall_s = time.perf_counter() - started
        return record


class _Progress:
    """A line to stderr every few seconds: questions done, the headline metric so far, ETA."""

    def __init__(
        self, total: int, sink: ProgressSink | None, every: float, k: int, on_tick: TickSink | None = None
    ) -> None:
        self.total = total
        self.sink = sink
        self.on_tick = on_tick
        self.every = every
        self.k = k
        self.count = 0
        self.started = time.monotonic()
        self.last = self.started
        self.values: dict[str, list[float]] = {}

    def tick(self, record: Record) -> None:
        self.count += 1
        for name in ("correct", "judged", "f1", "hit_rate"):
            value = record.metrics.get(name)
            if value is not None:
                self.values.setdefault(f"{record.method} {_LABELS[name].format(k=self.k)}", []).append(value)
                break
        now = time.monotonic()
        if self.on_tick:
            self.on_tick(self.count, self.total, self.so_far())
        elif self.sink and now - self.last >= self.every:
            self.last = now
            self.sink(self.line(now))

    def note(self, text: str) -> None:
        """Something slow is starting (a tree build): say so before the next question line."""
        if self.on_tick:
            self.on_tick(self.count, self.total, text)
        elif self.sink:
            self.sink(f"  {text}")

    def so_far(self) -> str:
        return ", ".join(f"{n} {sum(v) / len(v):.3f}" for n, v in self.values.items())

    def line(self, now: float) -> str:
        elapsed = now - self.started
        rate = self.count / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.count) / rate if rate > 0 else float("nan")
        so_far = self.so_far()
        return (
            f"  {self.count}/{self.total} done ({self.count / max(self.total, 1):.0%})"
            f"{', ' + so_far if so_far else ''}; {rate:.1f}/s, ETA {_duration(eta)}"
        )

    def finish(self) -> None:
        if self.sink and self.count and not self.on_tick:
            self.sink(self.line(time.monotonic()))


_LABELS = {"correct": "accuracy", "judged": "judged", "f1": "F1", "hit_rate": "hit rate@{k}"}


def _duration(seconds: float) -> str:
    if seconds != seconds:  # NaN: nothing measured yet
        return "?"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


# -- resume ------------------------------------------------------------------------------------------


def _previous_run(out: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The earlier run in `out` when it is the same evaluation; refuses to mix different ones."""
    run_file, results = out / RUN, out / RESULTS
    if not run_file.exists():
        if results.exists() and results.stat().st_size > 0:
            raise UserError(
                f"{out} holds {RESULTS} but no {RUN}: choose another --out or remove that directory"
            )
        return None
    try:
        info = json.loads(run_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{run_file}: unreadable ({exc}); choose another --out or remove it") from exc
    old = info.get("resume_key") or {}
    changed = [f"{n}: {old.get(n)!r} → {key[n]!r}" for n in key if old.get(n) != key[n]]
    if changed:
        raise UserError(
            f"{out} holds a different evaluation ({'; '.join(changed)}): "
            "choose another --out, or remove it to start over"
        )
    return dict(info)


def _load_records(path: Path) -> tuple[dict[tuple[str, str], Record], int]:
    """Finished records by (method, case id), the last line winning; plus the count of bad lines."""
    done: dict[tuple[str, str], Record] = {}
    bad = 0
    if not path.exists():
        return done, 0
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                record = Record.model_validate_json(line)
            except ValueError:  # a line cut short when the run was killed
                bad += 1
                continue
            done[(record.method, record.case_id)] = record
    return done, bad


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)  # atomic: a kill never leaves a half-written run.json


# -- summary -----------------------------------------------------------------------------------------


def _stats(records: Sequence[Record]) -> dict[str, Any]:
    def metric(name: str) -> float | None:
        return mean(r.metrics.get(name) for r in records)

    def count(name: str) -> int:
        return sum(1 for r in records if r.metrics.get(name) is not None)

    return {
        "questions": len(records),
        "errors": sum(1 for r in records if r.error),
        "accuracy": metric("correct"),
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


def _headline_numbers(s: dict[str, Any]) -> dict[str, Any]:
    keys = ("questions", "accuracy", "em", "f1", "judged", "hit_rate", "recall", "recall_budget")
    return {k: s[k] for k in (*keys, "tokens_read_mean", "llm_calls", "wall_s", "setup_s", "setup_calls")}


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
    if limit is not None:
        args += ["--limit", str(limit)]
    args += ["--k", str(k), "--budget", str(budget)]
    if seed:
        args += ["--seed", str(seed)]
    if db:
        args += ["--db", str(db)]
    args += ["--out", str(out)]
    return shlex.join(args)
