"""The tree as an index: zero-call build time of a ~100k-character corpus, the index's share of it,
an incremental update, and retrieval latency.

    PYTHONPATH=src python benchmarks/bench_tree_index.py [--chars 100000] [--embedder default]

Corpus: QuALITY articles from ../shared/data/quality_dev.jsonl (never copied into the repo), written
as text files until `--chars` characters. The build is `--summaries none` with a model that fails on
any call (so "zero model calls" is checked, not assumed). The index time is measured around
`sync_entries`, the one hook the store calls on save; its share is of the non-model build time.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import knowtree.retrieve.treeindex as treeindex
from knowtree.core import KnowTree
from knowtree.testing.models import FunctionModel, KeywordModel

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def _refuse(request: Any) -> Any:
    raise AssertionError(f"a zero-call build asked the model ({request.schema_name})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=100_000)
    ap.add_argument("--embedder", default="default")
    ap.add_argument("--data", default=str(DATA / "quality_dev.jsonl"))
    args = ap.parse_args()

    timings: list[float] = []
    reports: list[treeindex.SyncReport] = []
    original = treeindex.sync_entries

    def timed(conn: Any, tree: str) -> treeindex.SyncReport:
        t = time.perf_counter()
        report = original(conn, tree)
        timings.append(time.perf_counter() - t)
        reports.append(report)
        return report

    treeindex.sync_entries = timed  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files, total = [], 0
        for n, line in enumerate(Path(args.data).read_text(encoding="utf-8").splitlines()):
            text = json.loads(line)["input"][: args.chars - total]
            path = root / "docs" / f"article{n}.txt"
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            files.append(str(path))
            total += len(text)
            if total >= args.chars:
                break
        with KnowTree(root / "kb.db", model=FunctionModel(_refuse, id="none"), summaries="none") as kt:
            t0 = time.perf_counter()
            report = kt.build(files, tree="t")
            build_s = time.perf_counter() - t0
            index_s = sum(timings)
            first = reports[-1]
            t1 = time.perf_counter()
            ev = kt.tree("t").retrieve(
                "What did the captain decide to do?", budget_tokens=1024, embedder=args.embedder
            )
            first_retrieve_s = time.perf_counter() - t1
            t2 = time.perf_counter()
            kt.tree("t").retrieve(
                "Who was waiting at the station?", budget_tokens=1024, embedder=args.embedder
            )
            retrieve_s = time.perf_counter() - t2
            # an edit in one file: the rebuild re-indexes only what changed
            Path(files[0]).write_text(Path(files[0]).read_text(encoding="utf-8") + "\nA closing line.\n")
            timings.clear()
            kt.build(files, tree="t")
            update = reports[-1]
        # a summarized build with an instant fake model: its wall time is the non-model part of a
        # real summarized build (prompts, validation, cache and ledger writes, storing)
        timings.clear()
        with KnowTree(root / "kb2.db", model=KeywordModel()) as kt:
            t3 = time.perf_counter()
            summarized = kt.build(files, tree="s")
            summarized_s = time.perf_counter() - t3
        summarized_index_s = sum(timings)
    print(
        json.dumps(
            {
                "chars": total,
                "files": len(files),
                "nodes": report.nodes,
                "leaves": report.leaves,
                "model_calls": report.usage.calls + report.usage.cached,
                "build_s": round(build_s, 2),
                "index_s": round(index_s, 3),
                "index_share_of_rest": round(index_s / max(build_s - index_s, 1e-9), 3),
                "entries": first.entries,
                "first_retrieve_s (embeds every entry)": round(first_retrieve_s, 2),
                "retrieve_s": round(retrieve_s, 3),
                "evidence_items": len(ev),
                "update_entries_written": update.written,
                "update_entries_removed": update.removed,
                "summarized_build_fake_model_s": round(summarized_s, 2),
                "summarized_model_requests": summarized.usage.calls + summarized.usage.cached,
                "summarized_index_s": round(summarized_index_s, 3),
                "summarized_index_share_of_rest": round(
                    summarized_index_s / max(summarized_s - summarized_index_s, 1e-9), 3
                ),
                "embedder": args.embedder,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
