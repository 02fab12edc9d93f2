"""Answering from a large tree's index: the time of `Tree.ask` (retrieve and nav modes) and of
`Tree.retrieve` on zero-call chunk trees of growing size, with the instant keyword model, so what is
measured is knowtree's own work per question (routing, retrieval, reading the evidence's nodes,
the answer step), not model latency.

The corpus is synthetic and deterministic: documents of sentences drawn from a fixed vocabulary, each
naming a person, a project and a number, so that questions have a few matching leaves among many.
Each size is built once (`--summaries none`: no model call); then each question is asked `--repeat`
times and the median is reported (see `measure`; the first call, which embeds the index's entries,
reported apart; `embed_index_s` and `first_retrieve_after_embed*_s`: the same first search after
`KnowTree.embed_index`, the step a server's build job ends with, on a copy of the database).

    PYTHONPATH=src python benchmarks/bench_ask_scale.py --docs 200 1000 4000 --out benchmarks/results/ask_scale.json
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from knowtree.core import KnowTree
from knowtree.testing.models import KeywordModel

PEOPLE = "alice bob carol dmitri erin farah gustav hana ivan jun".split()
PROJECTS = "atlas beacon cobalt delta ember falcon garnet harbor".split()
FILLER = (
    "the team reviewed the schedule and agreed to revisit the budget after the next release while "
    "the support queue stayed quiet and the documentation was updated for the new onboarding flow"
).split()
QUESTIONS = [
    "What did carol decide about the cobalt migration?",
    "Which number did ivan report for harbor?",
    "Who approved the ember budget?",
]


def write_corpus(directory: Path, docs: int, seed: int = 7) -> list[str]:
    """`docs` markdown files of ~2,500 characters each (deterministic)."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(docs):
        lines = [f"# Report {d}", ""]
        for _ in range(12):
            person, project = rng.choice(PEOPLE), rng.choice(PROJECTS)
            filler = " ".join(rng.sample(FILLER, 14))
            verb = rng.choice(["decided", "reported", "approved", "postponed"])
            lines.append(f"{person.title()} {verb} the {project} migration at {rng.randint(10, 999)}; {filler}.")
        path = directory / f"report{d:05d}.md"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(str(path))
    return paths


def timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def measure(db: Path, repeat: int) -> dict[str, Any]:
    """Medians over `repeat` rounds of `QUESTIONS`. `*_cold`: each question in a newly opened
    `KnowTree` (what a CLI call pays); the others: one `KnowTree` for all questions, a fresh `Tree`
    facade per question (what a server's requests pay: it keeps one `KnowTree`)."""
    out: dict[str, Any] = {}
    embedded = db.with_name("embedded.db")  # a copy whose index is embedded after the build, as a server job does
    shutil.copyfile(db, embedded)
    with KnowTree(db, model=KeywordModel()) as kt:
        out["first_retrieve_s"] = round(timed(lambda: kt.tree("t").retrieve(QUESTIONS[0], budget_tokens=2048)), 3)
    with KnowTree(embedded, model=KeywordModel()) as kt:
        out["embed_index_s"] = round(timed(lambda: kt.embed_index("t")), 3)
        # the server's next request: the same KnowTree, its index and vectors kept
        out["first_retrieve_after_embed_s"] = round(
            timed(lambda: kt.tree("t").retrieve(QUESTIONS[0], budget_tokens=2048)), 3
        )
    with KnowTree(embedded, model=KeywordModel()) as kt:  # a CLI call after the job: vectors read from the store
        out["first_retrieve_after_embed_cold_s"] = round(
            timed(lambda: kt.tree("t").retrieve(QUESTIONS[0], budget_tokens=2048)), 3
        )
    embedded.unlink()
    cold = []
    for _ in range(repeat):
        for q in QUESTIONS:
            with KnowTree(db, model=KeywordModel()) as kt:
                cold.append(timed(lambda q=q, kt=kt: kt.tree("t").ask(q, mode="retrieve", budget_tokens=2048)))
    out["ask_retrieve_cold_median_s"] = round(statistics.median(cold), 3)
    with KnowTree(db, model=KeywordModel()) as kt:
        for mode in ("retrieve", "nav"):
            times = []
            for _ in range(repeat):
                for q in QUESTIONS:
                    times.append(timed(lambda q=q, m=mode: kt.tree("t").ask(q, mode=m, budget_tokens=2048)))
            out[f"ask_{mode}_median_s"] = round(statistics.median(times), 3)
        times = []
        for _ in range(repeat):
            for q in QUESTIONS:
                times.append(timed(lambda q=q: kt.tree("t").retrieve(q, budget_tokens=2048)))
        out["retrieve_median_s"] = round(statistics.median(times), 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, nargs="+", default=[200, 1000, 4000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for docs in args.docs:
            root = Path(tmp) / f"d{docs}"
            paths = write_corpus(root / "docs", docs)
            db = root / "kb.db"
            with KnowTree(db, model=KeywordModel(), summaries="none") as kt:
                build_s = timed(lambda kt=kt, paths=paths: kt.build(paths, tree="t"))
                nodes = len(kt.store.load_nodes("t"))
            row = {"docs": docs, "chars": sum(Path(p).stat().st_size for p in paths), "nodes": nodes}
            row["build_s"] = round(build_s, 1)
            row.update(measure(db, args.repeat))
            print(json.dumps(row), flush=True)
            results.append(row)
    report = {"python": sys.version.split()[0], "machine": platform.machine(), "results": results}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
