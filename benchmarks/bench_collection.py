"""One question across every FinanceBench dev filing: is it routed to the right company and year, and
does the answer cite the document and page?

The collection holds all dev filings: the five of bench_financebench through the real PDF path
(outline or table of contents; cached on the same database), the others from the dataset's per-page
text (pdftotext), grouped in two-page windows (no model call). Each document carries the metadata a user would
give it: company, year and type, read off the FinanceBench document name (no LLM
descriptions: 37 description calls do not fit the embedded model's time budget; see --describe).
The question goes through `Tree.ask` with the `auto` collection strategy (metadata, since the
documents have some) and tree search inside the chosen document.

    flock /tmp/kt-model.lock .venv/bin/python benchmarks/bench_collection.py --model local
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("KT_DATA", ROOT.parent / "shared" / "data"))
DEFAULT_QUESTIONS = ["financebench_id_08286", "financebench_id_04458"]  # Amazon FY2019, Netflix FY2015
# built from their PDFs (their structure calls are cached by bench_financebench on the same database)
PDF_DOCS = [
    "NETFLIX_2015_10K",
    "AMAZON_2019_10K",
    "AMCOR_2023Q2_10Q",
    "FOOTLOCKER_2022_8K_dated_2022-08-19",
    "JOHNSON_JOHNSON_2022Q4_EARNINGS",
]


def doc_meta(name: str) -> dict[str, str]:
    """Company, year and type (with the quarter) from a FinanceBench document name (AMCOR_2023Q2_10Q)."""
    parts = name.split("_")
    i = next(k for k, p in enumerate(parts) if re.match(r"^\d{4}", p))
    company = " ".join(parts[:i])
    period = parts[i]
    kind = " ".join(parts[i + 1 :]).split(" dated")[0] if i + 1 < len(parts) else ""
    doc_type = kind.split("dated")[0].strip() + (f" {period[4:]}" if len(period) > 4 else "")
    return {"company": company, "year": period[:4], "doc_type": doc_type.strip()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="local")
    ap.add_argument(
        "--db", default="/tmp/kt-fb/fb.db", help="the same database as bench_financebench (cache)"
    )
    ap.add_argument("--questions", default=",".join(DEFAULT_QUESTIONS))
    ap.add_argument("--describe", action="store_true", help="also describe every document (1 call each)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "financebench_collection.json"))
    args = ap.parse_args()

    import knowtree
    from knowtree.construct.toc import page_windows
    from knowtree.ingest.pdf import load_pdf
    from knowtree.ingest.structure import StructuredDocument, join_pages

    with open(DATA / "financebench_dev_questions.jsonl", encoding="utf-8") as f:
        questions = {q["financebench_id"]: q for q in map(json.loads, f)}
    sources: list[StructuredDocument] = []
    with gzip.open(DATA / "financebench_dev_pages.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            name = row["doc_name"]
            pdf = DATA / "pdfs" / f"{name}.pdf"
            if pdf.exists() and name in PDF_DOCS:
                sd = load_pdf(str(pdf))
            else:
                document, ranges = join_pages(f"{name}.txt", row["pages"])
                sd = StructuredDocument(document=document, sections=[], pages=ranges, source="pages")
                sd.sections = page_windows(sd, 2)
            sd.meta = doc_meta(name)
            sources.append(sd)
    out: dict = {
        "benchmark": "financebench_dev collection",
        "model": args.model,
        "documents": len(sources),
        "questions": [],
    }
    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    with knowtree.open(args.db, model=args.model, describe=args.describe) as kt:
        started = time.monotonic()
        report = kt.build_sources(sources, tree="filings")
        out["build"] = {
            "nodes": report.nodes,
            "llm_calls": report.usage.calls,
            "cached": report.usage.cached,
            "seconds": round(time.monotonic() - started, 1),
        }
        print(report.line(), file=sys.stderr)
        tree = kt.tree("filings")
        by_file = {sd.path: sd for sd in sources}
        for qid in [q for q in args.questions.split(",") if q]:
            q = questions[qid]
            started = time.monotonic()
            answer = tree.ask(q["question"], mode="search")
            gold_doc = q["doc_name"]
            gold_pages = {int(e["evidence_page_num"]) + 1 for e in q["evidence"]}
            routed = answer.trace[0].outcome if answer.trace else ""
            chosen_files = [p for p in by_file if p in routed]
            cited = [
                {"file": c.file, "pages": [c.page_start, c.page_end], "quote": c.quote}
                for c in answer.citations
            ]
            read_pages = []
            for s in answer.trace:
                if s.action == "read":
                    for nid in s.options:
                        n = tree.nodes.get(nid)
                        if n is not None and n.spans and n.spans[0].page_start is not None:
                            read_pages += list(range(n.spans[0].page_start, n.spans[0].page_end + 1))
            row = {
                "id": qid,
                "question": q["question"],
                "gold_doc": gold_doc,
                "gold_pages": sorted(gold_pages),
                "routing": routed,
                "filters": answer.trace[0].reason if answer.trace else "",
                "routed_right": any(Path(p).stem.startswith(gold_doc) for p in chosen_files[:1]),
                "pages_read": read_pages,
                "evidence_page_read": bool(gold_pages & set(read_pages)),
                "status": answer.status,
                "answer": answer.answer,
                "gold_answer": q["answer"],
                "citations": cited,
                "llm_calls": answer.usage.calls,
                "seconds": round(time.monotonic() - started, 1),
            }
            out["questions"].append(row)
            print(json.dumps(row, indent=1), file=sys.stderr)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
