"""Render the recorded benchmark JSON files (benchmarks/results/) as the Markdown tables in RESULTS.md.

.venv/bin/python benchmarks/render_results.py   # prints Markdown; paste or redirect into RESULTS.md
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent / "results"


def core(path: Path) -> str:
    data = json.loads(path.read_text(encoding="utf-8"))
    b, s = data["build"], data["summary"]
    lines = [
        f"### Core: {data['benchmark']}",
        "",
        f"Command: `{data['command']}` — model `{data['model']}`, {data['machine']}, {data['date']}.",
        "",
        "| build | value |",
        "|---|---|",
        f"| corpus | {b['documents']} documents, {b['corpus_chars']:,} characters |",
        f"| tree | {b['nodes']} nodes, {b['leaves']} leaves, depth {b['depth']} |",
        f"| wall time | {b['wall_s']:.0f} s |",
        f"| LLM calls | {b['llm_calls']} ({b['cached']} from cache) |",
        f"| tokens | {b['input_tokens']:,} in + {b['output_tokens']:,} out |",
        f"| fallback metadata | {b['fallbacks']} nodes |",
        "",
        "| question (doc) | gold | picked | status | nav steps | leaves read | right doc read | LLM calls "
        "(cached) | tokens | read share of corpus | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["questions"]:
        lines.append(
            f"| {r['question'][:60]} ({r['doc']}) | {r['gold']} | {r['picked'] or '-'} | {r['status']} "
            f"| {r['nav_steps']} | {r['leaves_read']} | {'yes' if r['right_doc_read'] else 'no'} | {r['llm_calls']} ({r.get('cached_calls', 0)}) "
            f"| {r['tokens']:,} | {r['read_share_of_corpus']:.1%} | {r['wall_s']:.0f} |"
        )
    lines += [
        "",
        f"Summary: accuracy {s['accuracy']:.0%} over {s['questions']} questions; right document read in "
        f"{s['right_doc_read']:.0%}; statuses {s['status']}; mean {s['mean_nav_steps']} navigation steps, "
        f"{s['mean_tokens']:,} tokens, {s['mean_read_share']:.1%} of the corpus read, {s['mean_wall_s']} s per question.",
    ]
    return "\n".join(lines)


def model_choice(path: Path) -> str:
    data = json.loads(path.read_text(encoding="utf-8"))
    s = data["summary"]
    lines = [
        f"### Model choice: `{s['model']}`",
        "",
        f"Command: `{data['command']}`.",
        "",
        f"- Navigation, 10 clear cases (5 options each, knowtree's choose prompt): **{s['navigation_right']}/"
        f"{s['navigation_cases']}** right, {s['navigation_s_per_case']} s per choice.",
        f"- Leaf status (full walk on one leaf: decomposition, reading, evidence checks): **{s['leaf_status_right']}/"
        f"{s['leaf_cases']}** right — by expected status: {s['by_expected']}; {s['leaf_s_per_case']} s per question.",
        "",
        "| case | expected | got |",
        "|---|---|---|",
    ]
    for r in data["navigation"]:
        lines.append(f"| nav: {r['question']} | {r['expected']} | {r['chosen']} |")
    for r in data["leaf"]:
        lines.append(f"| leaf: {r['question']} | {r['expected']} | {r['status']} |")
    return "\n".join(lines)


def main() -> None:
    parts = []
    for path in sorted(HERE.glob("model_choice_*.json")):
        parts.append(model_choice(path))
    for path in sorted(HERE.glob("core_*.json")):
        parts.append(core(path))
    print("\n\n".join(parts))


if __name__ == "__main__":
    main()
