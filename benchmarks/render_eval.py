"""Render the evaluation harness's recorded runs (benchmarks/results/eval/*/summary.json) into RESULTS.md.

    python benchmarks/render_eval.py          # rewrites the section between the eval markers

Every row comes from a `knowtree eval` run; its command (in the run's summary) reproduces it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
RUNS = HERE / "results" / "eval"
RESULTS = HERE / "RESULTS.md"
BEGIN, END = "<!-- eval:begin -->", "<!-- eval:end -->"


def _f(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render() -> str:
    lines = [
        "| run | method | questions | accuracy | judged | F1 | hit rate@k / read | tokens read/q "
        "| LLM calls/q (+ build) | wall s/q |",
        "|" + "---|" * 10,
    ]
    commands = []
    plots = []
    for summary_path in sorted(RUNS.glob("*/summary.json")):
        s = json.loads(summary_path.read_text(encoding="utf-8"))
        run = summary_path.parent.name
        for name, m in s["methods"].items():
            setup = m.get("setup_calls") or {}
            build = setup.get("calls", 0) + setup.get("cached", 0)  # shared builds count for each method
            calls = m.get("llm_calls_mean") or 0.0
            lines.append(
                f"| {run} | {name} | {m['questions']} | {_f(m['accuracy'])} | {_f(m.get('judged'))} "
                f"| {_f(m['f1'])} | {_f(m['hit_rate'])} | {_f(m['tokens_read_mean'], 0)} "
                f"| {calls:.1f}{f' (+{build})' if build else ''} | {_f(m['wall_s_mean'], 1)} |"
            )
        commands.append(f"- `{run}`: `{s['command']}`" + (f" (model `{s['model']}`)" if s.get("model") else ""))
        for png in (s.get("plots") or {}).get("files", []):
            plots.append(f"![{run}: {png}](results/eval/{run}/{png})")
    return "\n".join([*lines, "", "Commands (run from the repository root):", "", *commands, "", *plots])


def main() -> int:
    text = RESULTS.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        print(f"{RESULTS}: add the markers {BEGIN} and {END} where the table goes", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    RESULTS.write_text(f"{head}{BEGIN}\n{render()}\n{END}{tail}", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
