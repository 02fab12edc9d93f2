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
import platform
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from knowtree.errors import UserError
from knowtree.store.portable import sqlite_version
from knowtree_eval.base import MethodParams
from knowtree_eval.datasets import Case, Dataset, default_pages_path, load_dataset
from knowtree_eval.execute import execute
from knowtree_eval.methods import make_method, parse_methods
from knowtree_eval.metrics import Tokenizer
from knowtree_eval.progress import Progress, ProgressSink, TickSink
from knowtree_eval.report import equivalent_command, headline, render_summary
from knowtree_eval.results import RESULTS, RUN, SUMMARY, SUMMARY_JSON, load_records, previous_run, write_json
from knowtree_eval.runtime import CHOICE_READS, Runtime
from knowtree_eval.summary import headline_numbers, setup_totals, summarize


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
        "sqlite": sqlite_version(),
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
    skip: int | None = None,
    nav: str | None = None,
    choice_reads: int = CHOICE_READS,
) -> dict[str, Any]:
    """Evaluate `methods` ("bm25" or "bm25,walk", or a list) on a dataset; returns the summary dict.

    `db` keeps retrieval indexes in an SQLite file across runs (default: in memory). `tokenizer`
    counts tokens (default: characters / 4). `progress` prints a line to stderr every
    `progress_every` seconds (or pass a callable to receive the lines); `on_tick(done, total, text)`
    is called after every question (the CLI's progress bar). `argv` is recorded in run.json when
    called from the command line.

    Subsets: `corpora` keeps the questions of the first N corpora (QuALITY articles, LoCoMo
    conversations, filings), `corpus` only the named ones ("conv-30" or a list), `per_corpus` the first N
    questions of each, `skip` drops the first N of what is left (a second subset: `skip=40, limit=40`),
    `limit` keeps the first N overall.

    `choice_reads` (default 2) reads each multiple-choice question that many times, its options
    rotated, and answers with the option of the highest mean letter probability
    (`runtime.read_answer`); every method that answers uses the same reader; 1 is one reading, as
    runs before the option had. Part of the run's identity for a dataset with multiple-choice
    questions.

    `nav` sets the `nav`/`nav-judge` options ("rounds=1,candidates=8", names of
    `knowtree.answer.nav.NavOptions`); it is part of the run's identity, so a resumed run keeps them.

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
    if choice_reads < 1:
        raise UserError(f"--choice-reads must be at least 1, got {choice_reads}")
    names = parse_methods(methods)
    kind = kind.lower()
    pages_path = None
    if kind == "financebench":
        pages_path = Path(pages) if pages else default_pages_path(path)
    dataset = load_dataset(kind, path, pages=pages_path)
    if not any(c.options for c in dataset.cases):  # the whole dataset's, so any subset resumes
        choice_reads = 1  # nothing to read twice: runs of free-form questions resume as before
    names_wanted = [corpus] if isinstance(corpus, str) else list(corpus or [])
    names_wanted = [n.strip() for c in names_wanted for n in c.split(",") if n.strip()]
    _subset(dataset, corpora=corpora, per_corpus=per_corpus, limit=limit, names=names_wanted, skip=skip)
    has_model = model is not None or model_object is not None
    params = MethodParams(k=k, budget=budget, model=model, seed=seed, answer=has_model)
    if nav:
        from knowtree.answer.nav import parse_options

        params.extra["nav"] = parse_options(nav)
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
    if nav:  # only when set, so runs recorded before the option existed still resume
        key["nav"] = nav
    if choice_reads != 1:  # only when more than one, so one-reading runs recorded before it resume
        key["choice_reads"] = choice_reads
    info = previous_run(out, key)
    done, unreadable = load_records(out / RESULTS)
    session: dict[str, Any] = {
        "started": _now(),
        "methods": names,
        "limit": limit,
        "corpora": corpora,
        "per_corpus": per_corpus,
        "skip": skip,
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
        skip=skip,
        nav=nav,
        choice_reads=choice_reads,
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
    write_json(out / RUN, info)
    runtime = Runtime(
        db=str(out / "knowtree.db"),
        model=model,
        model_object=model_object,
        judge=judge,
        judge_object=judge_object,
        choice_reads=choice_reads,
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
    meter = Progress(len(pending), sink, progress_every, k, on_tick)
    try:
        execute(pending, dataset, out / RESULTS, done, setup, db, tokenizer, meter, runtime, embedder)
        if has_model:
            session["model_id"] = runtime.model_id
    except BaseException as exc:
        session["status"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"failed: {exc}"[:300]
        session["finished"] = _now()
        write_json(out / RUN, info)
        raise
    finally:
        runtime.close()
    records = [done[(m.name, c.id)] for m in runners for c in dataset.cases if (m.name, c.id) in done]
    setup_s, setup_calls = setup_totals(setup, info.get("setup_s", {}))
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
    info["summary"] = {n: headline_numbers(s) for n, s in summary["methods"].items()}
    write_json(out / RUN, info)
    (out / SUMMARY).write_text(render_summary(summary, info), encoding="utf-8")
    write_json(out / SUMMARY_JSON, summary)
    return summary


def _subset(
    dataset: Dataset,
    *,
    corpora: int | None,
    per_corpus: int | None,
    limit: int | None,
    names: Sequence[str] = (),
    skip: int | None = None,
) -> None:
    """Keep a named subset of the questions: named corpora, the first N corpora, N per corpus, then
    the questions after the first `skip`, N overall."""
    checks = (("--corpora", corpora), ("--per-corpus", per_corpus), ("--skip", skip), ("--limit", limit))
    for name, value in checks:
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
    if skip:
        cases = cases[skip:]
    if limit is not None:
        cases = cases[:limit]
    dataset.cases = cases


# what `knowtree eval` (knowtree/cli/eval.py) takes from here: the entry point, the files, the headline
__all__ = ["RESULTS", "SUMMARY", "SUMMARY_JSON", "headline", "run_eval", "versions"]
