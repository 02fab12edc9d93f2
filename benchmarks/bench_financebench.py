"""FinanceBench (dev): do the pages a method reads contain the evidence page?

For each document of the subset (real SEC filings from ../shared/data/pdfs) the PDF is built into a
titles-only tree by knowtree's default PDF path (outline, else table of contents, else proposed
structure), then every dev question on that document is asked with

* `search`: one tree-search call over the outline; the sections it picks are read within the token
  budget (retrieval only by default: `--answer` adds the answer call);
* `walk`: the walker (choose, read, verify, backtrack) on the same tree;
* `retrieve`: the tree as an index (`Tree.retrieve`, no model call) within the same token budget;
  pages = the pages of the evidence pieces shown (`--answer` adds the answer call, pages the same);
* `bm25`: SQLite FTS5 BM25 over the document's pages, top k pages, with k = the pages the compared
  method read for that question (so at the same page budget), and at a fixed k.

Recorded per question: evidence page hit, pages and tokens read, LLM calls (real and cached),
model tokens and wall time. Run with the embedded model under the shared lock:

    flock /tmp/kt-model.lock .venv/bin/python benchmarks/bench_financebench.py --model local
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("KT_DATA", ROOT.parent / "shared" / "data"))

# five dev documents that have a PDF (6 questions): sized so that walk and search with the embedded
# model finish in a session on 2 shared cores; --docs takes any others (BESTBUY_2023_10K,
# Pfizer_2023Q2_10Q, ADOBE_2022_10K have 3, 3 and 2 questions)
DEFAULT_DOCS = [
    "NETFLIX_2015_10K",
    "AMAZON_2019_10K",
    "AMCOR_2023Q2_10Q",
    "FOOTLOCKER_2022_8K_dated_2022-08-19",
    "JOHNSON_JOHNSON_2022Q4_EARNINGS",
]


def load_questions(docs: list[str]) -> list[dict]:
    with open(DATA / "financebench_dev_questions.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if r["doc_name"] in docs]


def evidence_pages(q: dict) -> set[int]:
    """Physical 1-based pages (the dataset's evidence_page_num is 0-based)."""
    return {
        int(e["evidence_page_num"]) + 1
        for e in q["evidence"]
        if e.get("doc_name", q["doc_name"]) == q["doc_name"]
    }


def pages_read(trace: list, nodes: dict) -> list[int]:
    pages: list[int] = []
    for step in trace:
        if step.action != "read":
            continue
        ids = step.options if step.options else ([step.node_id] if step.node_id else [])
        for nid in ids:
            node = nodes.get(nid)
            if node is None:
                continue
            for s in node.spans:
                if s.page_start is not None:
                    pages.extend(range(s.page_start, (s.page_end or s.page_start) + 1))
    return list(dict.fromkeys(pages))


def evidence_pages_read(evidence: list) -> list[int]:
    """The pages of the evidence pieces `Tree.retrieve` returned (their citations' page ranges)."""
    pages: list[int] = []
    for ev in evidence:
        c = ev.citation
        if c.page_start is not None:
            pages.extend(range(c.page_start, (c.page_end or c.page_start) + 1))
    return list(dict.fromkeys(pages))


def _no_answer(question: str):
    from knowtree.types import Answer

    return Answer(question=question, answer=None, status="none")


def text_tokens(trace: list, nodes: dict) -> int:
    seen: set[str] = set()
    chars = 0
    for step in trace:
        if step.action != "read":
            continue
        for nid in step.options or ([step.node_id] if step.node_id else []):
            if nid in nodes and nid not in seen and nodes[nid].is_leaf:
                seen.add(nid)
                chars += len(nodes[nid].text)
    return chars // 4


def bm25_pages(doc_name: str, page_texts: list[str], question: str, k: int, db: str) -> list[int]:
    from knowtree.retrieve.bm25 import LexicalIndex, Passage

    with LexicalIndex(db, name=f"fb_{abs(hash(doc_name)) % 10**8}") as index:
        index.ensure([Passage(id=str(i + 1), text=t, doc=doc_name) for i, t in enumerate(page_texts)])
        return [int(pid) for pid, _ in index.search(question, k=k)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default=",".join(DEFAULT_DOCS))
    ap.add_argument("--model", default="local")
    ap.add_argument("--modes", default="search,walk")
    ap.add_argument("--db", default="/tmp/kt-fb/fb.db")
    ap.add_argument("--budget", type=int, default=3000, help="tokens tree search reads")
    ap.add_argument("--fixed-k", type=int, default=4, help="BM25 pages at a fixed budget")
    ap.add_argument("--attempts", type=int, default=1, help="walk: branches to try")
    ap.add_argument("--leaves", type=int, default=2, help="walk: leaves read per branch")
    ap.add_argument("--answer", action="store_true", help="search: also make the answer call")
    ap.add_argument("--describe", action="store_true", help="describe each document at build (1 call each)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "financebench_docs.json"))
    args = ap.parse_args()

    import knowtree
    from knowtree.answer.router import Plan
    from knowtree.answer.walk import WalkOptions
    from knowtree.errors import KnowtreeError

    docs = [d for d in args.docs.split(",") if d]
    questions = load_questions(docs)
    pages_by_doc = {}
    with gzip.open(DATA / "financebench_dev_pages.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row["doc_name"] in docs:
                pages_by_doc[row["doc_name"]] = row["pages"]
    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    out: dict = {
        "benchmark": "financebench_dev",
        "model": args.model,
        "documents": docs,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "db")},
        "builds": [],
        "questions": [],
    }
    modes = [m for m in args.modes.split(",") if m]
    with knowtree.open(args.db, model=args.model, describe=args.describe) as kt:
        import pypdf  # noqa: F401 - fail early when the PDF dependency is missing

        for doc in docs:
            pdf = DATA / "pdfs" / f"{doc}.pdf"
            started = time.monotonic()
            report = kt.build([str(pdf)], tree=doc)
            from knowtree.store.docinfo import doc_infos

            info = doc_infos(kt.store, doc)[0]
            out["builds"].append(
                {
                    "doc": doc,
                    "pages": info.pages,
                    "structure": info.source,
                    "nodes": report.nodes,
                    "leaves": report.leaves,
                    "llm_calls": report.usage.calls,
                    "cached": report.usage.cached,
                    "seconds": round(time.monotonic() - started, 1),
                }
            )
            print(
                f"built {doc}: {info.source}, {report.nodes} nodes, {report.usage.calls} calls",
                file=sys.stderr,
            )
        rows: dict[str, dict] = {}
        for mode in modes:  # one mode over every question, then the next: partial runs stay comparable
            for q in questions:
                doc = q["doc_name"]
                tree = kt.tree(doc)
                nodes = tree.nodes
                gold = evidence_pages(q)
                row = rows.setdefault(
                    q["financebench_id"],
                    {
                        "id": q["financebench_id"],
                        "doc": doc,
                        "question": q["question"],
                        "evidence_pages": sorted(gold),
                    },
                )
                if row not in out["questions"]:
                    out["questions"].append(row)
                started = time.monotonic()
                options = None
                if mode == "walk":
                    options = WalkOptions(
                        max_branch_attempts=args.attempts,
                        leaves_per_branch=args.leaves,
                        leaf_chars=max(
                            6000, max((len(n.text) for n in nodes.values() if n.is_leaf), default=0)
                        ),
                    )
                try:
                    if mode == "retrieve":
                        evidence = tree.retrieve(q["question"], budget_tokens=args.budget)
                        answer = (
                            tree.run_plan(
                                Plan("retrieve", "retrieve"), q["question"], budget_tokens=args.budget
                            )
                            if args.answer
                            else _no_answer(q["question"])
                        )
                    else:
                        evidence = None
                        answer = tree.run_plan(
                            Plan("structured", mode),
                            q["question"],
                            budget_tokens=args.budget,
                            walk_options=options,
                            answer=args.answer or mode == "walk",
                        )
                except KnowtreeError as exc:  # recorded as a miss with its error, never skipped silently
                    answer = _no_answer(q["question"])
                    failure = f"{type(exc).__name__}: {exc}"
                else:
                    failure = None
                if mode == "retrieve" and failure is None:
                    read = evidence_pages_read(evidence)
                    tokens = sum(ev.tokens for ev in evidence)
                else:
                    read = pages_read(answer.trace, nodes)
                    tokens = text_tokens(answer.trace, nodes)
                row[mode] = {
                    "hit": bool(gold & set(read)),
                    "pages": read,
                    "pages_read": len(read),
                    "text_tokens": tokens,
                    "llm_calls": answer.usage.calls,
                    "cached": answer.usage.cached,
                    "model_tokens": answer.usage.input_tokens + answer.usage.output_tokens,
                    "seconds": round(time.monotonic() - started, 1),
                    "status": answer.status,
                    "answer": answer.answer,
                    "errors": [s.error for s in answer.trace if s.error] + ([failure] if failure else []),
                }
                k = max(1, len(read))
                bm = bm25_pages(doc, pages_by_doc[doc], q["question"], k, args.db + ".bm25")
                row[f"bm25@{mode}"] = {"k": k, "hit": bool(gold & set(bm)), "pages": bm}
                bm = bm25_pages(doc, pages_by_doc[doc], q["question"], args.fixed_k, args.db + ".bm25")
                row[f"bm25@{args.fixed_k}"] = {"k": args.fixed_k, "hit": bool(gold & set(bm)), "pages": bm}
                print(
                    json.dumps(
                        {
                            "id": row["id"],
                            "mode": mode,
                            "hit": row[mode]["hit"],
                            "pages": read,
                            "gold": sorted(gold),
                            "s": row[mode]["seconds"],
                            "bm25": row[f"bm25@{mode}"]["hit"],
                        }
                    ),
                    file=sys.stderr,
                )
                summarize(out)
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(out, indent=2), encoding="utf-8")
    summarize(out)
    Path(args.out).write_text(json.dumps(out, indent=2), encoding="utf-8")
    print(json.dumps(out["summary"], indent=2))
    return 0


def render(paths: list[str]) -> str:
    """A markdown table from result files (one row per method; BM25 at the method's own page budget)."""
    lines = [
        "| method | questions | evidence page hit | pages read/q | text tokens read/q | LLM calls/q | model tokens/q | wall s/q |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        summ = data.get("summary") or {}
        for key, s in summ.items():
            if not isinstance(s, dict):
                continue
            if "mean_pages_read" in s:
                lines.append(
                    f"| {key} | {s['n']} | {s['hit_rate']:.3f} | {s['mean_pages_read']} | {s['mean_text_tokens']:.0f} "
                    f"| {s['mean_llm_calls']} | {s['mean_model_tokens']:.0f} | {s['mean_seconds']} |"
                )
            else:
                lines.append(
                    f"| {key} (BM25, k = {s['mean_k']} pages) | {s['n']} | {s['hit_rate']:.3f} | {s['mean_k']} | – | 0 | 0 | <0.1 |"
                )
    return "\n".join(lines)


def summarize(out: dict) -> None:
    qs = out["questions"]
    summary: dict = {"questions": len(qs), "documents": len(out["documents"])}
    keys = sorted({k for q in qs for k in q if isinstance(q[k], dict)})
    for key in keys:
        rows = [q[key] for q in qs if key in q]
        s: dict = {"hit_rate": round(sum(r["hit"] for r in rows) / len(rows), 3), "n": len(rows)}
        if "pages_read" in rows[0]:
            for f in ("pages_read", "text_tokens", "llm_calls", "model_tokens", "seconds"):
                s[f"mean_{f}"] = round(sum(r[f] for r in rows) / len(rows), 1)
        else:
            s["mean_k"] = round(sum(r["k"] for r in rows) / len(rows), 1)
        summary[key] = s
    out["summary"] = summary


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--render":
        print(render(sys.argv[2:]))
        sys.exit(0)
    sys.exit(main())
