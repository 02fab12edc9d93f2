"""Running the pending (question, method) pairs: corpus contexts, per-corpus preparation (timed as
setup), one question at a time appended to results.jsonl, a judge's verdict when the run has one."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from knowtree.errors import ModelError
from knowtree_eval.base import CorpusContext, Method, Record
from knowtree_eval.datasets import Case, Dataset
from knowtree_eval.metrics import Tokenizer
from knowtree_eval.progress import Progress
from knowtree_eval.runtime import Runtime
from knowtree_eval.scoring import answer_metrics, base_record


def execute(
    pending: list[tuple[Case, Method]],
    dataset: Dataset,
    results: Path,
    done: dict[tuple[str, str], Record],
    setup: dict[str, dict[str, Any]],
    db: str | Path | None,
    tokenizer: Tokenizer | None,
    meter: Progress,
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
                judge_record(record, case, runtime)
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


def judge_record(record: Record, case: Case, runtime: Runtime) -> None:
    """A judged verdict for a free-form answer when the run has a judge; its calls are not the method's."""
    kt = runtime.judge_kt()
    if kt is None or record.error or case.options or case.answer is None:
        return
    if record.prediction is None and record.llm_calls == 0 and record.cached_calls == 0:
        return  # an LLM-free retrieval record: nothing was answered, nothing to judge
    from knowtree_eval.judge import judge_answer

    try:
        with kt.run("judge", record.method, case.question) as run:  # a failure closes the run "failed"
            assert run.client is not None
            verdict = judge_answer(run.client, case.question, case.answer, record.prediction)
    except ModelError as exc:
        record.metrics["judged"] = None
        record.error = f"judge: {type(exc).__name__}: {exc}"[:500]
        return
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
