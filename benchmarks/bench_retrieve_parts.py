"""Where a warm question's time goes on an E9 database (issue 36): each of `bench_scale_index.py`'s
questions answered by one `Tree.retrieve` (one process, after a warm-up question), its wall time split
by the SQL statements it ran (on PostgreSQL: every `execute` timed, grouped by the statement's first
words) and by the index's phases (`TreeIndex.lexical_top`, `dense_top`, `_ann_top`).

Prints p50 / p90 / p99 / max, the median and max of each part over the questions, and the slowest
questions' parts; `--rounds N` answers the whole set N times in the same process (a server's buffers
filling: the first round after a restart reads from disk).

    PYTHONPATH=src python benchmarks/bench_retrieve_parts.py --db URL --leaves 1000000 --work W --rounds 3

`--work` is the folder `bench_scale_index.py` wrote its corpus in (the questions are drawn from it, as
that bench draws them).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import bench_scale_index as e9

Parts = collections.defaultdict[str, float]


def _timed(fn: Callable[..., Any], name: Callable[[tuple[Any, ...]], str], parts: Parts) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            parts[name(args)] += time.perf_counter() - started

    return run


def instrument(parts: Parts) -> None:
    """Time every statement of the PostgreSQL handle and the index's phases into `parts`."""
    from knowtree.retrieve import treeindex
    from knowtree.store import pgconn

    pgconn.Connection.execute = _timed(  # type: ignore[method-assign]
        pgconn.Connection.execute, lambda a: " ".join(str(a[1]).split())[:72], parts
    )
    for phase in ("lexical_top", "dense_top", "_ann_top"):
        method = getattr(treeindex.TreeIndex, phase)
        setattr(treeindex.TreeIndex, phase, _timed(method, lambda _a, p=phase: f"PHASE {p}", parts))


def report(rows: list[tuple[float, str, dict[str, float]]], slowest: int) -> None:
    rows = sorted(rows, key=lambda r: r[0])
    ms = [1000 * r[0] for r in rows]
    at = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    print(f"p50 {statistics.median(ms):.1f} ms  p90 {at(0.9):.1f}  p99 {at(0.99):.1f}  max {ms[-1]:.1f}")
    by_part: dict[str, list[float]] = collections.defaultdict(list)
    for _, _, parts in rows:
        for part, seconds in parts.items():
            by_part[part].append(1000 * seconds)
    print("  median ms    max ms  part")
    for part, values in sorted(by_part.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"  {statistics.median(values):9.1f} {max(values):9.1f}  {part}")
    for total, question, parts in rows[-slowest:]:
        print(f"slow: {1000 * total:.1f} ms  {question}")
        for part, seconds in sorted(parts.items(), key=lambda kv: -kv[1])[:5]:
            print(f"  {1000 * seconds:9.1f}  {part}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="the E9 database (URL or SQLite file)")
    ap.add_argument("--leaves", type=int, required=True)
    ap.add_argument("--work", required=True, help="bench_scale_index.py's --work folder")
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--questions", type=int, default=120)
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--slowest", type=int, default=3)
    args = ap.parse_args()

    from knowtree.core import KnowTree
    from knowtree.testing.models import KeywordModel

    facts = e9.write_corpus(Path(args.work) / f"corpus{args.leaves}", args.leaves, args.files)
    questions = e9.questions(facts, args.questions)
    parts: Parts = collections.defaultdict(float)
    instrument(parts)
    with KnowTree(args.db, model=KeywordModel()) as kt:
        tree = kt.tree("t")
        tree.retrieve(questions[0][0], budget_tokens=args.budget)
        for n in range(args.rounds):
            rows = []
            for question, _ in questions:
                parts.clear()
                started = time.perf_counter()
                tree.retrieve(question, budget_tokens=args.budget)
                rows.append((time.perf_counter() - started, question, dict(parts)))
            print(f"round {n + 1}:")
            report(rows, args.slowest)


if __name__ == "__main__":
    main()
