"""The tree as an index: zero-call build time of a ~100k-character corpus, the index's share of it,
an incremental update, and retrieval latency.

    PYTHONPATH=src python benchmarks/bench_tree_index.py [--chars 100000] [--embedder default]
        [--corpus quality|hotpotqa] [--messages 2760] [--repeat 5] [--no-retrieve]

Corpus: QuALITY articles from ../shared/data/quality_dev.jsonl (never copied into the repo), written
as text files until `--chars` characters, or (`--corpus hotpotqa`) the 489 distinct HotpotQA dev
paragraphs as one Markdown file each. The build is `--summaries none` with a model that fails on
any call (so "zero model calls" is checked, not assumed). The index time is measured around
`sync_entries`, the one hook the store calls on save; its share is of the non-model build time.
Each build is run again unchanged (the index's time then: only the content fingerprint).
`--messages N`: also add the first N LoCoMo dev turns to a memory (KeywordModel), then time the
index sync a first search does, and again after 20 more messages.
`--repeat N`: N rounds, each in a fresh directory; every time is the median of the rounds, with its
range. Builds and index syncs are timed in wall time and in process CPU time (`*_cpu*`): on a
shared machine wall time is noisy, CPU time is what an A/B compares. The wrapper passes on whatever
the store's hook gives `sync_entries`, so the same script measures an older checkout
(`PYTHONPATH=<old checkout>/src`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import knowtree.retrieve.treeindex as treeindex
from knowtree.core import KnowTree
from knowtree.testing.models import FunctionModel, KeywordModel

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def _quality_files(root: Path, data: Path, chars: int) -> tuple[list[str], int]:
    files, total = [], 0
    for n, line in enumerate(data.read_text(encoding="utf-8").splitlines()):
        text = json.loads(line)["input"][: chars - total]
        path = root / "docs" / f"article{n}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        files.append(str(path))
        total += len(text)
        if total >= chars:
            break
    return files, total


def _hotpot_files(root: Path, data: Path) -> tuple[list[str], int]:
    seen: dict[str, str] = {}
    for q in json.loads(data.read_text(encoding="utf-8")):
        pairs = [(q["title_a"], q["para_a"]), (q["title_b"], q["para_b"])]
        pairs += [(d[0], d[1]) for d in q["distractors"]]
        for title, sentences in pairs:
            seen.setdefault(title, f"# {title}\n\n" + "".join(sentences) + "\n")
    files = []
    (root / "docs").mkdir(exist_ok=True)
    for n, text in enumerate(seen.values()):
        path = root / "docs" / f"p{n}.md"
        path.write_text(text, encoding="utf-8")
        files.append(str(path))
    return files, sum(len(t) for t in seen.values())


def _locomo_messages(data: Path, limit: int) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for sample in json.loads(data.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        sessions = [k for k in conv if k.startswith("session_") and not k.endswith("date_time")]
        for key in sorted(sessions, key=lambda k: int(k.split("_")[1])):
            out += [{"role": "user", "name": t["speaker"], "content": t["text"]} for t in conv[key]]
    return out[:limit]


def _refuse(request: Any) -> Any:
    raise AssertionError(f"a zero-call build asked the model ({request.schema_name})")


class _Clock:
    """Wall (perf_counter) and process CPU (process_time) time together: the machine is shared, so
    wall time is noisy; CPU time counts only this process's work."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def stop(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def _share(index: float, total: float) -> float:
    return round(index / max(total - index, 1e-9), 3)


def run_once(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """One round of every measurement, in a fresh directory `root`."""
    timings: list[tuple[float, float]] = []  # (wall, cpu) of each index sync
    reports: list[treeindex.SyncReport] = []
    original = treeindex.sync_entries

    def timed(conn: Any, tree: str, *rest: Any) -> treeindex.SyncReport:
        clock = _Clock()
        report = original(conn, tree, *rest)  # `rest`: the saved nodes, where the store hands them over
        timings.append(clock.stop())
        reports.append(report)
        return report

    def spent() -> tuple[float, float]:
        return sum(t[0] for t in timings), sum(t[1] for t in timings)

    treeindex.sync_entries = timed  # type: ignore[assignment]
    try:
        return _measure(args, root, timings, reports, spent)
    finally:
        treeindex.sync_entries = original


def _measure(
    args: argparse.Namespace,
    root: Path,
    timings: list[tuple[float, float]],
    reports: list[treeindex.SyncReport],
    spent: Callable[[], tuple[float, float]],
) -> dict[str, Any]:
    if args.corpus == "hotpotqa":
        files, total = _hotpot_files(root, Path(args.data or DATA / "hotpotqa_dev.json"))
    else:
        files, total = _quality_files(root, Path(args.data or DATA / "quality_dev.jsonl"), args.chars)
    with KnowTree(root / "kb.db", model=FunctionModel(_refuse, id="none"), summaries="none") as kt:
        clock = _Clock()
        report = kt.build(files, tree="t")
        build_s, build_cpu = clock.stop()
        index_s, index_cpu = spent()
        first = reports[-1]
        timings.clear()
        kt.build(files, tree="t")
        unchanged_index_s = spent()[0]
        ev: list[Any] = []
        first_retrieve_s = retrieve_s = float("nan")
        if not args.no_retrieve:
            t1 = time.perf_counter()
            ev = kt.tree("t").retrieve(
                "What did the captain decide to do?", budget_tokens=1024, embedder=args.embedder
            )
            first_retrieve_s = time.perf_counter() - t1
            t2 = time.perf_counter()
            kt.tree("t").retrieve("Who was waiting at the station?", budget_tokens=1024, embedder=args.embedder)
            retrieve_s = time.perf_counter() - t2
        # an edit in one file: the rebuild re-indexes only what changed
        Path(files[0]).write_text(Path(files[0]).read_text(encoding="utf-8") + "\nA closing line.\n")
        timings.clear()
        kt.build(files, tree="t")
        update = reports[-1]
        update_index_s = spent()[0]
    # a summarized build with an instant fake model: its wall time is the non-model part of a
    # real summarized build (prompts, validation, cache and ledger writes, storing)
    timings.clear()
    with KnowTree(root / "kb2.db", model=KeywordModel()) as kt:
        clock = _Clock()
        summarized = kt.build(files, tree="s")
        summarized_s, summarized_cpu = clock.stop()
        summarized_index_s, summarized_index_cpu = spent()
        timings.clear()
        t4 = time.perf_counter()
        kt.build(files, tree="s")  # unchanged: every answer cached, same nodes
        summarized_rebuild_s = time.perf_counter() - t4
        summarized_rebuild_index_s = spent()[0]
    memory: dict[str, Any] = {}
    if args.messages:
        msgs = _locomo_messages(DATA / "locomo_dev.json", args.messages)
        with KnowTree(root / "kb3.db", model=KeywordModel()) as kt:
            mem = kt.memory("m")
            t5 = time.perf_counter()
            mem.add(msgs[:-20])
            add_s = time.perf_counter() - t5
            t6 = time.perf_counter()
            synced = kt.store.write(lambda c: treeindex.sync_entries(c, "m"))
            memory["memory_first_sync_s"] = round(time.perf_counter() - t6, 3)
            memory["memory_entries"] = synced.entries
            mem.add(msgs[-20:])
            t7 = time.perf_counter()
            synced = kt.store.write(lambda c: treeindex.sync_entries(c, "m"))
            memory["memory_sync_after_20_more_s"] = round(time.perf_counter() - t7, 3)
            memory["memory_entries_written_after_20_more"] = synced.written
            memory["memory_entries_reused_after_20_more"] = getattr(synced, "reused", None)
            memory["chat_add_messages"] = len(msgs) - 20
            memory["chat_add_msgs_per_s"] = round((len(msgs) - 20) / add_s, 1)
    return {
        "chars": total,
        "files": len(files),
        "nodes": report.nodes,
        "leaves": report.leaves,
        "model_calls": report.usage.calls + report.usage.cached,
        "build_s": round(build_s, 3),
        "index_s": round(index_s, 3),
        "index_share_of_rest": _share(index_s, build_s),
        "build_cpu_s": round(build_cpu, 3),
        "index_cpu_s": round(index_cpu, 3),
        "index_share_of_rest_cpu": _share(index_cpu, build_cpu),
        "entries": first.entries,
        "first_retrieve_s (embeds every entry)": round(first_retrieve_s, 2),
        "retrieve_s": round(retrieve_s, 3),
        "evidence_items": len(ev),
        "update_entries_written": update.written,
        "update_entries_removed": update.removed,
        "update_entries_reused": getattr(update, "reused", None),  # None: a version without reuse
        "update_index_s": round(update_index_s, 3),
        "unchanged_rebuild_index_s": round(unchanged_index_s, 4),
        "summarized_build_fake_model_s": round(summarized_s, 3),
        "summarized_model_requests": summarized.usage.calls + summarized.usage.cached,
        "summarized_index_s": round(summarized_index_s, 3),
        "summarized_index_share_of_rest": _share(summarized_index_s, summarized_s),
        "summarized_build_cpu_s": round(summarized_cpu, 3),
        "summarized_index_cpu_s": round(summarized_index_cpu, 3),
        "summarized_index_share_of_rest_cpu": _share(summarized_index_cpu, summarized_cpu),
        "summarized_rebuild_s": round(summarized_rebuild_s, 3),
        "summarized_rebuild_index_s": round(summarized_rebuild_index_s, 4),
        **memory,
        "embedder": args.embedder,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=100_000)
    ap.add_argument("--embedder", default="default")
    ap.add_argument("--corpus", choices=("quality", "hotpotqa"), default="quality")
    ap.add_argument("--data", default=None, help="the corpus file (default: the dev file in ../shared/data)")
    ap.add_argument("--messages", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="rounds; numbers are their medians (and ranges)")
    ap.add_argument("--no-retrieve", action="store_true", help="builds and index syncs only (no embedding)")
    args = ap.parse_args()

    rounds = []
    for n in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            rounds.append(run_once(args, Path(tmp)))
        if args.repeat > 1:
            print(f"round {n + 1}: " + json.dumps({k: v for k, v in rounds[-1].items() if "share" in k}))
    out: dict[str, Any] = {}
    for key, first in rounds[0].items():
        values = [r[key] for r in rounds]
        if isinstance(first, float) and len(rounds) > 1:
            out[key] = round(statistics.median(values), 4)
            out[key + " (range)"] = [min(values), max(values)]
        else:
            out[key] = first
    out["rounds"] = len(rounds)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
