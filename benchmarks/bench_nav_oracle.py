"""How much `nav` can move `tree`'s budget hit rate, with scripted judges instead of the model (no model).

    PYTHONPATH=src python benchmarks/bench_nav_oracle.py locomo /work/shared/data/locomo_dev.json --limit 40 --budget 1024

Runs `knowtree eval` with the methods `tree` and `nav` three times, the judge replaced by:
* `oracle`: "yes" exactly for candidates cut from a gold evidence passage, "no" otherwise (the best a
  judge can do with this beam: the ceiling of the design at its candidate count and rounds);
* `all-no`: "no" for everything (a judge that rejects all: how much a negative judge costs);
* `all-yes`: "yes" for everything.
Prints hit@budget per budget for `tree` and each judge. These are bounds on the design, not results
of the model: the model's numbers come from `knowtree eval ... --method tree,nav --model local`.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import knowtree.answer.nav as nav
import knowtree_eval.navmethod as navmethod
from knowtree.testing.models import FunctionModel
from knowtree_eval.runner import run_eval

CURRENT: dict[str, Any] = {}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind")
    ap.add_argument("path")
    ap.add_argument("--limit", type=int, default=40)
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--candidates", type=int, default=nav.NavOptions().candidates)
    ap.add_argument("--rounds", type=int, default=nav.NavOptions().rounds)
    ap.add_argument("--judges", default="oracle,all-no,all-yes")
    ap.add_argument("--first", choices=["top", "edge"], default=nav.NavOptions().first)
    args = ap.parse_args()
    options = nav.NavOptions(candidates=args.candidates, rounds=args.rounds, first=args.first)
    navmethod.nav_method = lambda p, judge_only=False: navmethod.NavMethod(
        k=p.k, budget=p.budget, answer=p.answer, options=options
    )

    original_run = navmethod.NavMethod.run

    def run(self: Any, case: Any, ctx: Any) -> Any:  # remember the gold passages' texts
        CURRENT["gold"] = [
            " ".join(ctx.corpus.text(p).split()) for p in case.evidence if p in ctx.corpus.passages
        ]
        CURRENT["docs"] = set(case.evidence)
        return original_run(self, case, ctx)

    navmethod.NavMethod.run = run  # type: ignore[method-assign]
    policy = {"name": "oracle"}
    original_judge = nav.judge

    def judge(client: Any, question: str, units: Any, rows: Any, options: Any) -> Any:
        def grade(request: Any) -> Any:
            numbers = re.findall(r"^\[(\d+)\] ", request.messages[-1].content, flags=re.M)
            if policy["name"] != "oracle":
                return {n: policy["name"].split("-")[1] for n in numbers}
            out = {}
            for n, u in zip(numbers, units, strict=True):
                text = " ".join(rows[u.pieces[0]].text.split())
                gold = any(text and text in g for g in CURRENT["gold"])
                gold = gold or rows[u.pieces[0]].cite.get("file") in CURRENT["docs"]
                out[n] = "yes" if gold else "no"
            return out

        fake = FunctionModel(grade, id=f"judge-{policy['name']}")
        from knowtree.core import KnowTree

        with KnowTree(":memory:", model=fake) as kt:
            return original_judge(kt.client(), question, units, rows, options)

    nav.judge = judge
    rows = {}
    for name in args.judges.split(","):
        policy["name"] = name
        with tempfile.TemporaryDirectory() as out:
            summary = run_eval(
                args.kind,
                args.path,
                "tree,nav",
                Path(out),
                limit=args.limit,
                budget=args.budget,
                progress=False,
                model_object=FunctionModel(lambda r: {"answer": "-"}, id="reader"),
            )
        for method in ("tree", "nav"):
            label = "tree" if method == "tree" else f"nav[{name}]"
            rows[label] = summary["methods"][method]["hit_by_budget"]
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
