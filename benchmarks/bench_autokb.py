"""AutoKB: HitRate@1/3/5 of the KB issue retrieved for a user query, against flat baselines at the
same k, plus KB statistics and build cost.

Scoring follows `../shared/data/autokb/README.md`: a KB issue carries the majority label of its
member raw issues (members without a dev label count together as "other"); a query hits at k when
one of the first k issues retrieved carries its label. Baselines: BM25 and dense top-k over the raw
issues (a raw issue carries its own label, or "other"), and over the raw document chunks (TV: the
chunk's manual section title is one of the parts of the query's section path; medical: the MedQuAD
record's focus names the query's disease).

    python benchmarks/bench_autokb.py --domain tv --model keyword            # LLM-free retrieval parts
    flock /tmp/kt-model.lock python benchmarks/bench_autokb.py --domain tv --model local --solutions 10

`--dense-weight W|hybrid` sets the issue ranking's semantic step (`kbindex.DENSE_WEIGHT`: W the
weight of the mean-centred dense cosine against TF-IDF, `hybrid` the older BM25 + dense rank fusion),
so before and after run from this one script (`--dense-weight 0.5,hybrid,0,1`: the first is the main
run, the same KB is re-asked with each other one). TV also reports the lenient hit (data README: the
KB issue's section path has the query's parent path) under "lenient".
`--metadata keywords` (default with the keyword model) extracts query metadata without a model;
`--metadata model` asks the model (one call per query). `--solutions N` generates lazy solutions for
the first N queries' issues and reports compliance, citation verification and (medical) precaution
recall. Results go to benchmarks/results/autokb_<domain>_<model>.json.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("KT_DATA", ROOT.parent / "shared" / "data")) / "autokb"
KS = (1, 3, 5)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        return [json.loads(line) for line in f if line.strip()]


def domain_files(domain: str, docs_limit: int | None) -> dict[str, Any]:
    bench = ROOT / "benchmarks" / "autokb"
    if domain == "tv":
        labels = {r["id"]: r["section"] for r in read_jsonl(DATA / "tv_raw_issues.jsonl")}
        queries = [(q["text"], q["section"]) for q in read_jsonl(DATA / "tv_queries.jsonl")]
        return {
            "issues": DATA / "tv_raw_issues_all.jsonl",
            "docs": [DATA / "tv_manual_sections.jsonl"],
            "attributes": bench / "tv_attributes.toml",
            "rules": bench / "tv_rules.toml",
            "labels": labels,
            "queries": queries,
        }
    labels = {r["id"]: r["label"] for r in read_jsonl(DATA / "medical_issue_labels.jsonl")}
    queries = [(q["text"], q["label"]) for q in read_jsonl(DATA / "medical_queries.jsonl")]
    docs = DATA / "medquad.jsonl.gz"
    if docs_limit:  # a stated subset of MedQuAD, written to a temporary file
        tmp = Path(tempfile.mkdtemp()) / "medquad_subset.jsonl"
        with tmp.open("w", encoding="utf-8") as f:
            for r in read_jsonl(docs)[:docs_limit]:
                f.write(json.dumps(r) + "\n")
        docs = tmp
    return {
        "issues": DATA / "medical_raw_issues.jsonl",
        "docs": [docs],
        "attributes": bench / "medical_attributes.toml",
        "rules": bench / "medical_rules.toml",
        "labels": labels,
        "queries": queries,
    }


def half(text: str) -> int:
    """The dev split (0 or 1) of a query: the parity of the SHA-1 of its text. Weights of the KB's
    ranking (kbindex.ROLLUP_WEIGHT) were set on half 0; half 1 is reported beside it."""
    return int(hashlib.sha1(text.encode("utf-8")).hexdigest(), 16) % 2


def dense_weight(value: str) -> float | Literal["hybrid"]:
    """A `--dense-weight` value: 'hybrid' or a weight in [0, 1]."""
    if value == "hybrid":
        return "hybrid"
    w = float(value)
    if not 0 <= w <= 1:
        raise SystemExit(f"--dense-weight {value}: use a weight in [0, 1] or 'hybrid'")
    return w


def parent(path: str) -> str:
    """A TV section path without its last `>` part ('' for a top-level section or a non-TV label)."""
    return path.rsplit(">", 1)[0] if ">" in path else ""


def lenient(ranked: list[list[str]], gold: list[str]) -> list[list[str]]:
    """TV's lenient hit (data README): a label counts as the query's when it has the same parent
    path; the ranked labels are rewritten so `hit_rates` scores it."""
    return [
        [g if lab == g or (parent(g) and parent(lab) == parent(g)) else lab for lab in row]
        for row, g in zip(ranked, gold, strict=True)
    ]


def hit_rates(ranked: list[list[str]], gold: list[str], texts: list[str] | None = None) -> dict[str, Any]:
    def rates(rows: list[int]) -> dict[str, float]:
        return {
            f"@{k}": round(sum(gold[i] in ranked[i][:k] for i in rows) / max(1, len(rows)), 3) for k in KS
        }

    out: dict[str, Any] = rates(list(range(len(gold))))
    if texts is not None:
        for h in (0, 1):
            rows = [i for i, t in enumerate(texts) if half(t) == h]
            out[f"half{h}"] = {"n": len(rows), **rates(rows)}
    return out


def norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower().replace("’", "'")).strip()


def chunk_label(domain: str, chunk: Any, gold: str) -> str:
    """The query's label when the chunk belongs to it (see the module docstring), else 'other'."""
    if domain == "tv":
        parts = {norm(p) for p in gold.split(">")}
        return gold if norm(chunk.path[-1] if chunk.path else "") in parts else "other"
    focus = norm(chunk.path[0] if chunk.path else "")
    return gold if focus and (focus in norm(gold) or norm(gold) in focus) else "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--domain", choices=["tv", "medical"], default="tv")
    ap.add_argument("--model", default="keyword")
    ap.add_argument("--embedder", default=None, help="an embedder name (default: the default embedder)")
    ap.add_argument("--metadata", choices=["keywords", "model", "none"], default=None)
    ap.add_argument("--threshold", type=float, default=None)
    ap.add_argument("--rollup", type=float, default=None, help="kbindex.ROLLUP_WEIGHT (0: no chunk roll-up)")
    ap.add_argument(
        "--dense-weight",
        default=None,
        help="kbindex.DENSE_WEIGHT: W in [0, 1], the dense side of the issue similarity, or 'hybrid'"
        " (the BM25 + dense reciprocal-rank fusion); several, comma-separated: the first is the main"
        " run, the KB is re-asked with each other one",
    )
    ap.add_argument("--docs-limit", type=int, default=None, help="medical: only the first N MedQuAD records")
    ap.add_argument(
        "--issues-limit", type=int, default=None, help="only the first N raw issues (a stated subset)"
    )
    ap.add_argument("--queries-limit", type=int, default=None, help="only the first N queries")
    ap.add_argument("--solutions", type=int, default=0, help="generate solutions for the first N queries")
    ap.add_argument("--db", default=None, help="database file (default: a temporary one)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-baselines", action="store_true", help="score the KB only (no flat baselines)")
    ap.add_argument(
        "--rerank-model",
        default=None,
        help="after the main run, re-ask every query with `rerank=True`, this model grading the top 5"
        " (e.g. local); reported as 'kb + rerank (MODEL)' with its calls and seconds",
    )
    ap.add_argument(
        "--solutions-model",
        default=None,
        help="generate the --solutions with this model instead (e.g. local), after the main run on the"
        " same KB: the build and retrieval stay the main model's, the solutions and compliance checks are this one's",
    )
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    import knowtree
    from knowtree.ingest.kb_inputs import load_kb_docs, load_raw_issues
    from knowtree.retrieve import LexicalIndex, Passage, VectorIndex, kbindex
    from knowtree.store import kb as kbstore

    if args.rollup is not None:
        kbindex.ROLLUP_WEIGHT = args.rollup
    weights = [w.strip() for w in args.dense_weight.split(",")] if args.dense_weight else []
    if weights:
        kbindex.DENSE_WEIGHT = dense_weight(weights[0])

    files = domain_files(args.domain, args.docs_limit)
    if args.issues_limit:
        subset = Path(tempfile.mkdtemp()) / "issues_subset.jsonl"
        subset.write_text(
            "".join(json.dumps(r) + "\n" for r in read_jsonl(files["issues"])[: args.issues_limit])
        )
        files["issues"] = subset
    if args.queries_limit:
        files["queries"] = files["queries"][: args.queries_limit]
    metadata = args.metadata or ("keywords" if args.model == "keyword" else "model")
    db = args.db or str(Path(tempfile.mkdtemp()) / "kb.db")
    overrides: dict[str, Any] = {"threads": args.threads} if args.threads else {}
    kt = knowtree.open(db, model=args.model, **overrides)
    kb = kt.kb(args.domain, embedder=args.embedder)
    options = {"threshold": args.threshold} if args.threshold is not None else {}
    started = time.monotonic()
    existing = args.domain in kbstore.kb_names(kt.store)
    report = None
    if not existing:
        report = kb.build(
            issues=str(files["issues"]),
            docs=[str(d) for d in files["docs"]],
            attributes=str(files["attributes"]),
            rules=str(files["rules"]),
            solutions="lazy",
            progress=lambda s, d, t: print(f"  {s} {d}/{t}", file=sys.stderr) if d in (0, t) else None,
            **options,
        )
        print(report.line(), file=sys.stderr)
    build_s = time.monotonic() - started

    labels: dict[str, str] = files["labels"]
    rows = kb.export()
    majority = {}
    for row in rows:
        c = collections.Counter(labels.get(m, "other") for m in row["members"])
        majority[row["id"]] = c.most_common(1)[0][0] if c else None
    queries = files["queries"]
    gold = [g for _, g in queries]
    texts = [t for t, _ in queries]

    # the KB (Algorithm 2)
    ranked, matches, ask_s = [], collections.Counter(), time.monotonic()
    answers, passage_labels = [], []
    for i, (text, g) in enumerate(queries):
        solve = i < args.solutions and not args.solutions_model
        answer = kb.ask(text, k=5, metadata=metadata, solve=solve, passages=max(KS))
        answers.append(answer)
        ids = [a.issue.id for a in answer.accepted]
        ranked.append([majority.get(x) or "none" for x in ids])
        matches[answer.match] += 1
        # the answer's passages for the query itself, labelled as the raw-chunk baselines' chunks are
        passage_labels.append([chunk_label(args.domain, SimpleNamespace(path=p["path"]), g) for p in answer.passages])
    ask_s = time.monotonic() - ask_s
    results: dict[str, Any] = {"kb (Algorithm 2)": hit_rates(ranked, gold, texts)}
    if args.domain == "tv":
        results["kb (Algorithm 2)"]["lenient"] = hit_rates(lenient(ranked, gold), gold, texts)
    # not an issue hit rate: the documents' passages, comparable with "BM25 over raw chunks"
    results["kb answer passages (contextualized chunks, hybrid)"] = hit_rates(passage_labels, gold, texts)
    main_weight = kbindex.DENSE_WEIGHT
    for w in weights[1:]:  # the same KB re-asked with the other weights (no solutions)
        kbindex.DENSE_WEIGHT = dense_weight(w)
        rk = []
        for text, _ in queries:
            ids = [a.issue.id for a in kb.ask(text, k=5, metadata=metadata, solve=False).accepted]
            rk.append([majority.get(x) or "none" for x in ids])
        name = f"kb (Algorithm 2), dense weight {kbindex.DENSE_WEIGHT}"
        results[name] = hit_rates(rk, gold, texts)
        if args.domain == "tv":
            results[name]["lenient"] = hit_rates(lenient(rk, gold), gold, texts)
    kbindex.DENSE_WEIGHT = main_weight

    # flat baselines over raw issues and raw chunks, same k
    raw = load_raw_issues(files["issues"])
    from knowtree.construct.kb.chunks import chunk_sections

    chunks = chunk_sections(load_kb_docs([str(d) for d in files["docs"]]))
    by_id = {c.id: c for c in chunks}
    emb = kb.indexes().embedder
    lex_raw, vec_raw = LexicalIndex(":memory:"), VectorIndex(":memory:", embedder=emb)
    lex_ch, vec_ch = LexicalIndex(":memory:"), VectorIndex(":memory:", embedder=emb)
    if not args.no_baselines:
        lex_raw.add([Passage(r.id, r.text) for r in raw])
        vec_raw.add([Passage(r.id, r.text) for r in raw])
        lex_ch.add([Passage(c.id, c.text, doc=c.doc_id) for c in chunks])
        vec_ch.add([Passage(c.id, c.text, doc=c.doc_id) for c in chunks])
    for name, idx, kind in (
        ("BM25 over raw issues", lex_raw, "raw"),
        ("dense over raw issues", vec_raw, "raw"),
        ("BM25 over raw chunks", lex_ch, "chunk"),
        ("dense over raw chunks", vec_ch, "chunk"),
    ):
        if args.no_baselines:
            break
        rk = []
        for text, g in queries:
            hits = [pid for pid, _ in idx.search(text, max(KS))]
            if kind == "raw":
                rk.append([labels.get(pid, "other") for pid in hits])
            else:
                rk.append([chunk_label(args.domain, by_id[pid], g) for pid in hits])
        results[name] = hit_rates(rk, gold, texts)
        if args.domain == "tv":
            results[name]["lenient"] = hit_rates(lenient(rk, gold), gold, texts)

    stats = {
        "raw_issues": len(raw),
        "themes": len(kbstore.load_themes(kt.store, args.domain)),
        "clusters": len(kbstore.load_clusters(kt.store, args.domain)),
        "parents": sum(r["kind"] == "parent" for r in rows),
        "children": sum(r["kind"] == "child" for r in rows),
        "chunks": len(chunks),
    }
    usage = kt.store.runs(f"kb:{args.domain}", limit=1000)
    build_runs = [r for r in usage if r["kind"] == "kb-build"]
    cost = build_runs[0]["usage"] if build_runs else {}
    out: dict[str, Any] = {
        "domain": args.domain,
        "model": kt.model.id,
        "embedder": emb.id,
        "metadata": metadata,
        "rollup": kbindex.ROLLUP_WEIGHT,
        "dense_weight": kbindex.DENSE_WEIGHT,
        "queries": len(queries),
        "issues_limit": args.issues_limit,
        "hit_rate": results,
        "matches": dict(matches),
        "stats": stats,
        "build": {
            "calls": cost.get("calls"),
            "cached": cost.get("cached"),
            "input_tokens": cost.get("input_tokens"),
            "output_tokens": cost.get("output_tokens"),
            "wall_s": round(build_s, 1),
            "calls_per_raw_issue": round((cost.get("calls") or 0) / max(1, len(raw)), 3),
            "reused_existing_kb": existing,
        },
        "ask_s_per_query": round(ask_s / max(1, len(queries)), 2),
    }
    if args.solutions and not args.solutions_model:
        out["solutions"] = solution_report(args.domain, answers[: args.solutions], queries)
    kt.close()
    if args.solutions and args.solutions_model:
        out["solutions"] = solutions_run(db, args, queries, metadata)
    if args.rerank_model:
        name, report = rerank_run(db, args, queries, majority, metadata)
        results[name] = report.pop("hit_rate")
        if args.domain == "tv":
            results[name]["lenient"] = hit_rates(lenient(report.pop("ranked"), gold), gold, texts)
        report.pop("ranked", None)
        out["rerank"] = report
    print(json.dumps(out, indent=2))
    target = (
        Path(args.out)
        if args.out
        else ROOT / "benchmarks" / "results" / f"autokb_{args.domain}_{args.model.split(':')[0]}.json"
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(out, indent=2) + "\n")


def reask(
    db: str, args: argparse.Namespace, model: str, queries: list[tuple[str, str]], **ask: Any
) -> tuple[list[Any], list[float], dict[str, dict[str, Any]]]:
    """The KB the main run built, asked again with `model` (`ask`: the `kb.ask` options): the answers,
    the seconds of each, and that model's calls by purpose (calls, cached, tokens, seconds)."""
    import knowtree

    kt = knowtree.open(db, model=model)
    kb = kt.kb(args.domain, embedder=args.embedder)
    answers, seconds = [], []
    for text, _ in queries:
        started = time.monotonic()
        answers.append(kb.ask(text, k=5, **ask))
        seconds.append(time.monotonic() - started)
    rows = kt.store.query(
        "SELECT purpose, COUNT(*), SUM(cached), SUM(input_tokens), SUM(output_tokens), SUM(seconds)"
        " FROM llm_calls WHERE model = ? GROUP BY purpose",
        [kt.model.id],
    )
    kt.close()
    calls = {
        r[0]: {
            "calls": r[1],
            "cached": r[2],
            "input_tokens": r[3],
            "output_tokens": r[4],
            "seconds": round(r[5] or 0, 1),
        }
        for r in rows
    }
    return answers, seconds, calls


def rerank_run(
    db: str, args: argparse.Namespace, queries: list[tuple[str, str]], majority: dict[str, Any], metadata: str
) -> tuple[str, dict[str, Any]]:
    """The same KB re-asked with `rerank=True`, `args.rerank_model` grading the top 5 of each query
    (metadata as in the main run, no solutions). Returns the result name and its report: hit rates,
    the ranked labels (for the lenient hit), calls, tokens, seconds per query and malformed replies."""
    import statistics

    answers, seconds, calls = reask(
        db, args, args.rerank_model, queries, metadata=metadata, solve=False, rerank=True
    )
    ranked, malformed, moved = [], 0, 0
    for answer in answers:
        step = next((t for t in answer.trace if t.get("step") == "rerank"), None)
        if step and "error" in step:
            malformed += 1
        if step and step.get("order") and step["order"][0] != step["candidates"][0]:
            moved += 1
        ranked.append([majority.get(a.issue.id) or "none" for a in answer.accepted])
    gold, texts = [g for _, g in queries], [t for t, _ in queries]
    rerank_calls = calls.get("kb_rerank", {})
    report = {
        "model": args.rerank_model,
        "hit_rate": hit_rates(ranked, gold, texts),
        "ranked": ranked,
        "calls": rerank_calls.get("calls", 0),
        "cached": rerank_calls.get("cached"),
        "input_tokens": rerank_calls.get("input_tokens"),
        "output_tokens": rerank_calls.get("output_tokens"),
        "seconds_median": round(statistics.median(seconds), 2) if seconds else None,
        "malformed": malformed,
        "top_changed": moved,
    }
    return f"kb + rerank ({args.rerank_model})", report


def solutions_run(
    db: str, args: argparse.Namespace, queries: list[tuple[str, str]], metadata: str
) -> dict[str, Any]:
    """Solutions for the first `args.solutions` queries' issues, generated (lazily, as `kb ask` does)
    and checked by `args.solutions_model` on the KB the main run built; the report of
    `solution_report` plus the model's calls, tokens and seconds per solution."""
    import statistics

    answers, seconds, calls = reask(
        db, args, args.solutions_model, queries[: args.solutions], metadata=metadata, solve=True
    )
    report = solution_report(args.domain, answers, queries)
    report["model"] = args.solutions_model
    report["queries"] = len(answers)
    report["seconds_median"] = round(statistics.median(seconds), 1) if seconds else None
    report["calls_by_purpose"] = calls
    report["statuses"] = dict(collections.Counter(a.status for a in answers))
    return report


def solution_report(domain: str, answers: list[Any], queries: list[tuple[str, str]]) -> dict[str, Any]:
    """Compliance, citation verification and (medical) precaution recall of generated solutions."""
    refs = {}
    if domain == "medical":
        refs = {r["label"]: r for r in read_jsonl(DATA / "medical_reference.jsonl")}
    n = ok = flagged = ungrounded = cited = unverified = 0
    recall = []
    for answer, (_, gold) in zip(answers, queries, strict=False):
        sol = answer.solution
        if not sol:
            continue
        n += 1
        ok += answer.status == "ok"
        flagged += answer.status == "flagged"
        ungrounded += answer.status == "ungrounded"
        cited += len(sol.get("citations", []))
        unverified += len(sol.get("unverified", []))
        if gold in refs:
            words = set(norm(sol["text"]).split())
            for p in refs[gold]["precautions"]:
                pw = [w for w in norm(p).split() if len(w) > 3]
                recall.append(bool(pw) and sum(w in words for w in pw) / len(pw) >= 0.5)
    return {
        "solutions": n,
        "compliant": ok + ungrounded,
        "flagged": flagged,
        "ungrounded": ungrounded,
        "citations_kept": cited,
        "citations_dropped_unverified": unverified,
        "precaution_recall": round(sum(recall) / len(recall), 3) if recall else None,
    }


if __name__ == "__main__":
    main()
