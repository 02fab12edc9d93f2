"""Markdown tables from `bench_locomo_memory.py` result files (for benchmarks/RESULTS.md).

python benchmarks/memory_report.py benchmarks/results/locomo_memory_*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

METHODS = ("bm25", "embedding", "hybrid", "tree-nav", "tree")


def table(data: dict) -> str:
    s = data["summary"]
    cats = [c for c in s["bm25"] if c != "all"] + ["all"]
    lines = [
        f"**{data['conversation']}** (memory `{data['memory']}`, {data['messages']} messages, "
        f"{data['tree_info']['nodes']} nodes, depth {data['tree_info']['depth']}; budget "
        f"{data['budget_tokens']} tokens; model {data['model']})",
        "",
        "| method | "
        + " | ".join(f"{c} hit (n)" for c in cats)
        + " | recall (all) | tokens read | LLM calls |",
        "|---|" + "---|" * (len(cats) + 3),
    ]
    for m in METHODS:
        if m not in s:
            continue
        row = s[m]
        cells = [f"{row[c]['hit']:.2f} ({row[c]['n']})" if c in row else "–" for c in cats]
        calls = f"{row['all']['llm_calls']:.1f}" if "llm_calls" in row["all"] else "0"
        lines.append(
            f"| {m} | "
            + " | ".join(cells)
            + f" | {row['all']['recall']:.2f} | {row['all']['tokens']:.0f} | {calls} |"
        )
    if "subset" in s:
        sub = s["subset"]
        n = next(iter(sub.values()))["n"]
        lines += [
            "",
            f"Same {n} questions for every method (the tree's subset): "
            + ", ".join(f"{m} hit {v['hit']:.2f} / recall {v['recall']:.2f}" for m, v in sub.items()),
        ]
    if "judged" in s:
        j = s["judged"]
        full = f"{j['full_accuracy']:.2f}" if j["full_accuracy"] is not None else "does not fit the model"
        lines += [
            "",
            f"Judged accuracy on {j['n']} questions: tree {j['tree_accuracy']:.2f}, full context {full}",
        ]
    return "\n".join(lines)


def main(paths: list[str]) -> int:
    for p in paths:
        print(table(json.loads(Path(p).read_text())))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
