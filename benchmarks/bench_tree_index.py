"""The tree as an index: zero-call build time of a ~100k-character corpus, the index's share of it,
an incremental update, and retrieval latency.

    PYTHONPATH=src python benchmarks/bench_tree_index.py [--chars 100000] [--embedder default]
        [--corpus quality|hotpotqa] [--messages 2760]

Corpus: QuALITY articles from ../shared/data/quality_dev.jsonl (never copied into the repo), written
as text files until `--chars` characters, or (`--corpus hotpotqa`) the 489 distinct HotpotQA dev
paragraphs as one Markdown file each. The build is `--summaries none` with a model that fails on
any call (so "zero model calls" is checked, not assumed). The index time is measured around
`sync_entries`, the one hook the store calls on save; its share is of the non-model build time.
Each build is run again unchanged (the index's time then: only the content fingerprint).
`--messages N`: also add the first N LoCoMo dev turns to a memory (KeywordModel), then time the
index sync a first search does, and again after 20 more messages.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=100_000)
    ap.add_argument("--embedder", default="default")
    ap.add_argument("--corpus", choices=("quality", "hotpotqa"), default="quality")
    ap.add_argument("--data", default=None, help="the corpus file (default: the dev file in ../shared/data)")
    ap.add_argument("--messages", type=int, default=0)
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
        if args.corpus == "hotpotqa":
            files, total = _hotpot_files(root, Path(args.data or DATA / "hotpotqa_dev.json"))
        else:
            files, total = _quality_files(root, Path(args.data or DATA / "quality_dev.jsonl"), args.chars)
        with KnowTree(root / "kb.db", model=FunctionModel(_refuse, id="none"), summaries="none") as kt:
            t0 = time.perf_counter()
            report = kt.build(files, tree="t")
            build_s = time.perf_counter() - t0
            index_s = sum(timings)
            first = reports[-1]
            timings.clear()
            kt.build(files, tree="t")
            unchanged_index_s = sum(timings)
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
            update_index_s = sum(timings)
        # a summarized build with an instant fake model: its wall time is the non-model part of a
        # real summarized build (prompts, validation, cache and ledger writes, storing)
        timings.clear()
        with KnowTree(root / "kb2.db", model=KeywordModel()) as kt:
            t3 = time.perf_counter()
            summarized = kt.build(files, tree="s")
            summarized_s = time.perf_counter() - t3
            summarized_index_s = sum(timings)
            timings.clear()
            t4 = time.perf_counter()
            kt.build(files, tree="s")  # unchanged: every answer cached, same nodes
            summarized_rebuild_s = time.perf_counter() - t4
            summarized_rebuild_index_s = sum(timings)
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
                "update_entries_reused": getattr(update, "reused", None),  # None: a version without reuse
                "update_index_s": round(update_index_s, 3),
                "unchanged_rebuild_index_s": round(unchanged_index_s, 4),
                "summarized_build_fake_model_s": round(summarized_s, 2),
                "summarized_model_requests": summarized.usage.calls + summarized.usage.cached,
                "summarized_index_s": round(summarized_index_s, 3),
                "summarized_index_share_of_rest": round(
                    summarized_index_s / max(summarized_s - summarized_index_s, 1e-9), 3
                ),
                "summarized_rebuild_s": round(summarized_rebuild_s, 3),
                "summarized_rebuild_index_s": round(summarized_rebuild_index_s, 4),
                **memory,
                "embedder": args.embedder,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
