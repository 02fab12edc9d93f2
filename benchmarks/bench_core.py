"""Core benchmark: build a ~100k-character corpus with the embedded model and ask questions by navigation.

Corpus: the first N QuALITY dev articles (../shared/data/quality_dev.jsonl, written out as Markdown
in a temporary directory, never copied into the repo), ~96k characters for N=4. Questions: the first
Q multiple-choice questions of each article (L-Eval's added counting questions are skipped).

Records build wall time, LLM calls and tokens; per question the navigation steps, LLM calls, prompt
tokens, the leaf text read as a share of the corpus, wall time, the status and whether the option
letter in the answer is right.

    .venv/bin/python benchmarks/bench_core.py --articles 4 --questions 2 --out benchmarks/results/core_embedded.json
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import knowtree

ADDED_BY_LEVAL = re.compile(r"how many (words|sentences)|longest dialogue", re.IGNORECASE)


def load_quality(path: Path, articles: int, questions: int) -> tuple[list[tuple[str, str]], list[dict]]:
    docs, qs = [], []
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i >= articles:
                break
            row = json.loads(line)
            name = f"article_{i}.md"
            docs.append((name, row["input"]))
            kept = 0
            for q, gold in zip(row["instructions"], row["outputs"], strict=True):
                if ADDED_BY_LEVAL.search(q) or kept >= questions:
                    continue
                letter = re.match(r"\(?([A-D])\)?", gold.strip())
                qs.append({"doc": name, "question": q.strip(), "gold": letter.group(1) if letter else gold})
                kept += 1
    return docs, qs


def picked_letter(text: str | None) -> str | None:
    if not text:
        return None
    m = re.search(r"\(([A-D])\)|\b([A-D])\)|^([A-D])\b|option ([A-D])\b|answer is \(?([A-D])\b", text, re.M)
    return next((g for g in m.groups() if g), None) if m else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
    ap.add_argument("--articles", type=int, default=4)
    ap.add_argument("--questions", type=int, default=2)
    ap.add_argument("--model", default="local")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--db", default=None, help="reuse a database (its cache makes a rerun free)")
    ap.add_argument("--out", default="benchmarks/results/core_embedded.json")
    args = ap.parse_args()

    source = Path(args.data) / "quality_dev.jsonl"
    if not source.exists():
        print(f"benchmark data not found: {source}", file=sys.stderr)
        return 2
    docs, questions = load_quality(source, args.articles, args.questions)
    work = Path(tempfile.mkdtemp(prefix="kt-bench-"))
    for name, text in docs:
        (work / name).write_text(text, encoding="utf-8")
    corpus_chars = sum(len(t) for _, t in docs)
    db = args.db or str(work / "kb.db")

    kt = knowtree.open(db, model=args.model, threads=args.threads)
    started = time.monotonic()
    report = kt.build(sorted(str(p) for p in work.glob("article_*.md")), tree="bench")
    build = {
        "wall_s": round(time.monotonic() - started, 1),
        "documents": report.documents,
        "corpus_chars": corpus_chars,
        "nodes": report.nodes,
        "leaves": report.leaves,
        "depth": report.depth,
        "llm_calls": report.usage.calls,
        "cached": report.usage.cached,
        "input_tokens": report.usage.input_tokens,
        "output_tokens": report.usage.output_tokens,
        "fallbacks": report.fallbacks,
    }
    print(json.dumps({"build": build}), flush=True)

    tree = kt.tree("bench")
    rows = []
    for q in questions:
        t0 = time.monotonic()
        answer = tree.ask(q["question"] + "\nAnswer with the letter of the right option.")
        wall = time.monotonic() - t0
        read = [s.node_id for s in answer.trace if s.action == "read" and s.node_id]
        read_chars = sum(len(tree.nodes[n].text) for n in read)
        letter = picked_letter(answer.answer)
        row = {
            "doc": q["doc"],
            "question": q["question"].splitlines()[0][:120],
            "gold": q["gold"],
            "picked": letter,
            "right": letter == q["gold"],
            "status": answer.status,
            "nav_steps": len([s for s in answer.trace if s.action in ("choose", "read")]),
            "leaves_read": len(read),
            "right_doc_read": any(tree.nodes[n].spans[0].file.endswith(q["doc"]) for n in read),
            "llm_calls": answer.usage.calls,
            "cached_calls": answer.usage.cached,  # answered by the cache: they cost no tokens or time
            "tokens": answer.usage.input_tokens + answer.usage.output_tokens,
            "read_share_of_corpus": round(read_chars / corpus_chars, 4),
            "wall_s": round(wall, 1),
            "cited": [f"{c.file.rsplit('/', 1)[-1]}:{c.line_start}-{c.line_end}" for c in answer.citations],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    kt.close()

    n = len(rows) or 1
    summary = {
        "questions": len(rows),
        "accuracy": round(sum(r["right"] for r in rows) / n, 3),
        "right_doc_read": round(sum(r["right_doc_read"] for r in rows) / n, 3),
        "status": {s: sum(r["status"] == s for r in rows) for s in ("complete", "partial", "none")},
        "mean_nav_steps": round(sum(r["nav_steps"] for r in rows) / n, 2),
        "mean_tokens": round(sum(r["tokens"] for r in rows) / n),
        "mean_read_share": round(sum(r["read_share_of_corpus"] for r in rows) / n, 4),
        "mean_wall_s": round(sum(r["wall_s"] for r in rows) / n, 1),
    }
    out = {
        "benchmark": "core: QuALITY dev articles as one corpus, embedded model",
        "command": " ".join(["python", *sys.argv]),
        "model": args.model,
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, python {platform.python_version()}",
        "knowtree": knowtree.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "build": build,
        "summary": summary,
        "questions": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({"summary": summary}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
