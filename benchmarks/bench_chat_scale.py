"""Conversation import at scale: `chat add` of 1k / 3k / 10k messages, into an empty database and into
one that already holds ~30 MB of other trees, with the instant keyword model (so what is measured is
knowtree's own work: tree maintenance and storage, not model latency).

The chat is the one `shared/checks/safety.sh` uses: alternating user/assistant messages of 12 words
drawn from a 13-word vocabulary, a minute apart (one session, one long topic: the case that used to
nest one level deeper every 56 messages). The other trees are written through the store (synthetic
document leaves of 5,000 characters with metadata), so filling 30 MB costs seconds, not model calls.

Per run: wall time, messages per second, the tree's depth and node count, LLM calls, and the longest
write transaction (the time one add step holds the database's write lock). Then, in a new process
state (the database reopened), `Memory.context` (the index's evidence, no model call: what
`ask --mode retrieve` reads and what an agent's memory tool calls) for `QUESTIONS`: the first call
(which embeds the index's entries and stores their vectors) and the median of the calls after it.

    PYTHONPATH=src python benchmarks/bench_chat_scale.py --sizes 1000 3000 10000 --filler-mb 30 \\
        --out benchmarks/results/chat_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from knowtree.core import KnowTree
from knowtree.testing.models import KeywordModel
from knowtree.types import Node, NodeKind, NodeMeta, Span, content_hash

VOCAB = "paris cat meeting tom hiking friday coffee support group moved deploy database job".split()
QUESTIONS = [
    "when did tom go hiking",
    "what database job moved",
    "coffee with the support group",
    "the friday meeting in paris",
    "who deployed the cat",
]


def write_chat(path: Path, n: int, seed: int = 7) -> None:
    rnd = random.Random(seed)
    with path.open("w") as f:
        for i in range(n):
            rec = {
                "role": "user" if i % 2 == 0 else "assistant",
                "name": "Ann",
                "content": " ".join(rnd.choice(VOCAB) for _ in range(12)),
                "timestamp": 1709287200 + 60 * i,
            }
            f.write(json.dumps(rec) + "\n")


def fill_other_trees(kt: KnowTree, megabytes: float, per_tree_mb: float = 5.0) -> int:
    """Document trees of synthetic 5,000-character leaves until `megabytes` of text are stored."""
    rnd = random.Random(1)
    words = [f"w{i}" for i in range(5000)]
    total, t = 0, 0
    while total < megabytes * 1e6:
        name = f"other-{t}"
        leaves = []
        size = 0
        while size < per_tree_mb * 1e6 and total + size < megabytes * 1e6:
            text = " ".join(rnd.choice(words) for _ in range(900))[:5000]
            i = len(leaves)
            leaves.append(
                Node(
                    id=content_hash(name, str(i)),
                    kind=NodeKind.LEAF,
                    level=0,
                    meta=NodeMeta(summary=text[:300], about=[rnd.choice(words) for _ in range(5)]),
                    text=text,
                    spans=[Span(file=f"{name}.md", start=0, end=len(text), line_start=i + 1, line_end=i + 1)],
                )
            )
            size += len(text) + 300
        root = Node(
            id=content_hash(name, "root"),
            kind=NodeKind.ROOT,
            level=1,
            children=[n.id for n in leaves],
            meta=NodeMeta(summary=name),
        )
        kt.store.save_tree(
            name, root_id=root.id, nodes=[root, *leaves], documents=[], model="synthetic", settings={}
        )
        total += size
        t += 1
    return t


def run_one(db: Path, chat: Path, name: str) -> dict[str, Any]:
    with KnowTree(db, model=KeywordModel()) as kt:
        longest = 0.0
        save = kt.store.save_memory_step

        def timed(*args: Any, **kwargs: Any) -> None:
            nonlocal longest
            started = time.perf_counter()
            save(*args, **kwargs)
            longest = max(longest, time.perf_counter() - started)

        kt.store.save_memory_step = timed  # type: ignore[method-assign]
        started = time.perf_counter()
        report = kt.memory(name).add_file(chat)
        seconds = time.perf_counter() - started
    with KnowTree(db, model=KeywordModel()) as kt:
        memory = kt.memory(name)
        took = []
        for q in QUESTIONS:
            started = time.perf_counter()
            memory.context(q, 1000)
            took.append(time.perf_counter() - started)
    return {
        "messages": report.added,
        "seconds": round(seconds, 2),
        "messages_per_s": round(report.added / seconds, 1),
        "depth": report.depth,
        "nodes": report.nodes,
        "llm_calls": report.usage.calls + report.usage.cached,
        "longest_write_ms": round(longest * 1000, 1),
        "context_first_s": round(took[0], 2),
        "context_s": round(statistics.median(took[1:]), 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10000])
    ap.add_argument("--filler-mb", type=float, default=30.0, help="MB of other trees in the second db")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        filled = work / "filled.db"
        with KnowTree(filled, model=KeywordModel()) as kt:
            started = time.perf_counter()
            trees = fill_other_trees(kt, args.filler_mb)
            fill_s = time.perf_counter() - started
        fill_mb = os.path.getsize(filled) / 1e6
        print(f"other trees: {trees} trees, db {fill_mb:.1f} MB, written in {fill_s:.1f}s", file=sys.stderr)
        for n in args.sizes:
            chat = work / f"chat{n}.jsonl"
            write_chat(chat, n)
            for label, db in (
                ("empty db", work / f"empty{n}.db"),
                (f"db with {fill_mb:.0f} MB of other trees", filled),
            ):
                row = {"db": label, **run_one(db, chat, f"chat{n}")}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    result = {
        "benchmark": "chat_scale",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "filler_mb": round(fill_mb, 1),
        "rows": rows,
    }
    print(
        "| messages | database | seconds | msg/s | depth | nodes | LLM calls | longest write (ms) |"
        " context, first (s) | context (s) |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['messages']:,} | {r['db']} | {r['seconds']} | {r['messages_per_s']} | {r['depth']} |"
            f" {r['nodes']:,} | {r['llm_calls']:,} | {r['longest_write_ms']} | {r['context_first_s']} |"
            f" {r['context_s']} |"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
