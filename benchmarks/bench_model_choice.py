"""Does a model navigate? 10 clear navigation cases and 10 leaf cases, through knowtree's own prompts.

The default model must pick the right child on at least 9 of 10 clear cases and get the leaf status
(complete / partial / none) right, where "partial" is decided by knowtree's evidence checks, not by the
model's self-report (stack.md, pitfall 4). Cases are written here, not taken from benchmark data.

    .venv/bin/python benchmarks/bench_model_choice.py --model local --out benchmarks/results/model_choice_local.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import knowtree
from knowtree.answer.walk import Walker, WalkOptions, WalkState
from knowtree.llm.client import LLMClient
from knowtree.types import Node, NodeKind, NodeMeta, Span


def meta(summary: str, about: list[str], types: list[str], decisions: list[str] | None = None) -> NodeMeta:
    return NodeMeta(summary=summary, about=about, content_types=types, decisions=decisions or [])


OPTIONS = [
    meta(
        "Quarterly budget review: marketing spend cut by 12%, hiring freeze in sales until March.",
        ["budget", "marketing", "hiring freeze", "Q3"],
        ["Financial reports & statements"],
        ["Cut marketing by 12%"],
    ),
    meta(
        "Incident report: the payments API was down for 47 minutes on 3 May after a certificate expired.",
        ["payments API", "outage", "TLS certificate", "on-call"],
        ["Incident reports"],
    ),
    meta(
        "Onboarding guide for new engineers: laptop setup, VPN access, code review rules and the deploy checklist.",
        ["onboarding", "VPN", "code review", "deploy checklist"],
        ["How-to guides & procedures"],
    ),
    meta(
        "Design document for the search service: Elasticsearch replaced by PostgreSQL full-text search.",
        ["search service", "Elasticsearch", "PostgreSQL", "ranking"],
        ["Design documents"],
        ["Use PostgreSQL full-text search"],
    ),
    meta(
        "Customer interview notes: three hospital clients asked for audit logs and single sign-on.",
        ["customer interviews", "hospitals", "audit logs", "SSO"],
        ["Interviews & dialogue"],
    ),
]
NAV_CASES = [
    ("How long was the payments API unavailable?", 1),
    ("Which search engine did the search service move away from?", 3),
    ("What do new engineers need to get VPN access?", 2),
    ("By how much was the marketing budget cut?", 0),
    ("What features did hospital customers request?", 4),
    ("What caused the outage in May?", 1),
    ("Is there a hiring freeze in sales?", 0),
    ("What are the rules for code review?", 2),
    ("Why was PostgreSQL chosen for full-text search?", 3),
    ("Did any clients ask for single sign-on?", 4),
]

LEAF_TEXT = (
    "Release 7.1 of the Atlas mobile app shipped on 12 September 2024. Karin Lund was the release manager. "
    "The release added offline mode for field technicians and dropped support for Android 9. "
    "Crash reports fell by 38% in the first two weeks. The next release, 7.2, is planned for November and will "
    "add barcode scanning. The support team was trained on offline mode by Omar Farouk on 10 September."
)
LEAF_CASES = [
    ("Who was the release manager of Atlas 7.1?", "complete"),
    ("When did release 7.1 ship?", "complete"),
    ("By how much did crash reports fall?", "complete"),
    ("Which Android version lost support?", "complete"),
    ("Who trained the support team on offline mode?", "complete"),
    ("What is the price of an Atlas licence?", "none"),
    ("Which company manufactures the barcode scanners?", "none"),
    ("Who is the CEO of the company that makes Atlas?", "none"),
    ("Who was the release manager of 7.1, and what was the budget of the release?", "partial"),
    ("When is release 7.2 planned, and who will be its release manager?", "partial"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="local")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    kt = knowtree.open(":memory:", model=args.model, threads=args.threads)
    client = LLMClient(kt.model)

    # navigation: a root over five leaves whose metadata differ clearly
    leaves = [Node(id=f"opt{i}", kind=NodeKind.LEAF, level=0, meta=m, text="") for i, m in enumerate(OPTIONS)]
    root = Node(
        id="root",
        kind=NodeKind.ROOT,
        level=1,
        meta=meta("A company's internal documents.", [], []),
        children=[n.id for n in leaves],
    )
    nodes = {n.id: n for n in [*leaves, root]}
    walker = Walker(nodes, "root", client)
    nav = []
    t0 = time.monotonic()
    for question, expected in NAV_CASES:
        state = WalkState(parts=[question])
        chosen = walker._choose(root, root.children, question, state)
        got = root.children.index(chosen)
        nav.append(
            {
                "question": question,
                "expected": expected,
                "chosen": got,
                "right": got == expected,
                "error": state.trace[-1].error,
            }
        )
        print(json.dumps(nav[-1]), flush=True)
    nav_s = time.monotonic() - t0

    # leaf answers: one leaf, full walk (decompose, read, evidence checks)
    span = Span(file="release.md", start=0, end=len(LEAF_TEXT), line_start=1, line_end=1)
    leaf = Node(
        id="leaf",
        kind=NodeKind.LEAF,
        level=0,
        meta=meta("Atlas 7.1 release notes.", [], []),
        text=LEAF_TEXT,
        spans=[span],
    )
    lroot = Node(id="lroot", kind=NodeKind.ROOT, level=1, meta=leaf.meta, children=["leaf"], spans=[span])
    lwalker = Walker({"leaf": leaf, "lroot": lroot}, "lroot", client, WalkOptions(max_branch_attempts=1))
    flags = []
    t0 = time.monotonic()
    for question, expected in LEAF_CASES:
        answer = lwalker.ask(question)
        flags.append(
            {
                "question": question,
                "expected": expected,
                "status": answer.status,
                "right": answer.status == expected,
                "answer": answer.answer,
            }
        )
        print(json.dumps(flags[-1]), flush=True)
    leaf_s = time.monotonic() - t0

    summary = {
        "model": kt.model.id,
        "navigation_right": sum(r["right"] for r in nav),
        "navigation_cases": len(nav),
        "navigation_s_per_case": round(nav_s / len(nav), 1),
        "leaf_status_right": sum(r["right"] for r in flags),
        "leaf_cases": len(flags),
        "by_expected": {
            e: f"{sum(r['right'] for r in flags if r['expected'] == e)}/{sum(r['expected'] == e for r in flags)}"
            for e in ("complete", "none", "partial")
        },
        "leaf_s_per_case": round(leaf_s / len(flags), 1),
    }
    print(json.dumps({"summary": summary}), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(
            json.dumps(
                {
                    "command": " ".join(["python", *sys.argv]),
                    "summary": summary,
                    "navigation": nav,
                    "leaf": flags,
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
    kt.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
