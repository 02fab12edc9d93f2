"""Record an eval run's `summary.json` as a results file for the same-unit tables (render_results.py).

    python benchmarks/record_fair.py OUT/summary.json DATASET --machine "..." \
        [--cost vectors_s_per_100k_chars=0.5 --cost rescoring_s_per_question=0]

Writes `benchmarks/results/fair-retrieval/DATASET.json`: the run's command, the machine, today's date
(UTC), the questions, and per method hit@B / all@B and its setup and per-question wall time; `--cost`
adds the cost lines shown beside the quality numbers.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent / "results" / "fair-retrieval"
KEPT = ("hit_by_budget", "all_hit_by_budget", "setup_s", "wall_s_mean", "questions")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("summary")
    ap.add_argument("dataset", choices=("locomo", "hotpotqa", "financebench"))
    ap.add_argument("--machine", required=True)
    ap.add_argument("--embedder", default="m2v-minilm (default)")
    ap.add_argument(
        "--cost", action="append", default=[], help="NAME=SECONDS, e.g. vectors_s_per_100k_chars=0.5"
    )
    args = ap.parse_args()
    summary = json.loads(Path(args.summary).read_text(encoding="utf-8"))
    out = {
        "command": summary["command"],
        "machine": args.machine,
        "date": datetime.now(UTC).date().isoformat(),
        "embedder": args.embedder,
        "questions": summary["questions"],
        "budget": summary["budget"],
        "methods": {m: {k: s[k] for k in KEPT if k in s} for m, s in summary["methods"].items()},
        "costs": {k: float(v) for k, v in (c.split("=", 1) for c in args.cost)},
    }
    HERE.mkdir(parents=True, exist_ok=True)
    path = HERE / f"{args.dataset}.json"
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(path)


if __name__ == "__main__":
    main()
