"""AutoKB solutions three ways on the same user issues: from the model's own knowledge, from RAG over
the raw document chunks, and from the knowledge base.

For each selected query (a user's issue), with the same model, the same domain rules and the same
generate → check → regenerate-once loop (`construct/kb/compliance.solve`):

* **own knowledge**: the query alone, no passage;
* **raw-chunk RAG**: the query and its top 5 raw chunks by BM25 (no context prepended: the strongest
  flat chunk baseline of the retrieval tables);
* **KB**: `kb.ask(query, solve=True)`: Algorithm 2 picks the KB issue, whose solution is generated
  lazily from the contextualized chunks (or read back when already stored).

Scored without a model: compliance (the kept attempt broke no rule, judged by the model plus the rules'
phrase checks), grounded (≥ 1 citation whose quote is in its passage), quotes the model wrote that
verify, medical precaution recall against `medical_reference.jsonl` (a precaution counts when half of
its words of more than 3 letters are in the solution, as `bench_autokb.solution_report`), medical
"names the condition" (every word of the label but "disease", or its initials such as UTI), TV
reference-answer word recall (words of more than 3 letters, stopwords out) and "cites the query's
section". KB rows also say whether the issue retrieved carries the query's label.

    python benchmarks/bench_autokb.py --domain medical --model local --db /tmp/med.db       # builds the KB
    flock /tmp/kt-model.lock python benchmarks/bench_kb_solutions.py --domain medical --db /tmp/med.db \\
        --model local --per-label 1

Queries: the first `--per-label` queries of each label in file order (medical: one per dev disease),
then `--limit`. Results go to `--out` (default: kb_solutions_<domain>.json in the temporary
directory, since the rows quote the queries, which must not be copied into the repository;
`benchmarks/results/kb_solutions_medical_local.json` keeps the summary only).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_autokb import DATA, ROOT, chunk_label, domain_files, norm, read_jsonl

ARMS = ("own knowledge", "raw-chunk RAG", "KB")


def pick(queries: list[tuple[str, str]], per_label: int, limit: int | None) -> list[tuple[str, str]]:
    seen: collections.Counter[str] = collections.Counter()
    out = []
    for text, label in queries:
        if seen[label] < per_label:
            seen[label] += 1
            out.append((text, label))
    return out[:limit] if limit else out


def content_words(text: str) -> list[str]:
    from knowtree.text import STOPWORDS

    return [w for w in norm(text).split() if len(w) > 3 and w not in STOPWORDS]


def names_condition(label: str, text: str) -> bool:
    words = [w for w in norm(label).split() if w != "disease"]
    have = set(norm(text).split())
    initials = "".join(w[0] for w in norm(label).split())
    return all(w in have for w in words) or (len(initials) > 1 and initials in have)


def precaution_hits(precautions: list[str], text: str) -> list[bool]:
    have = set(norm(text).split())
    out = []
    for p in precautions:
        pw = [w for w in norm(p).split() if len(w) > 3]
        out.append(bool(pw) and sum(w in have for w in pw) / len(pw) >= 0.5)
    return out


def kept_violations(report: list[dict[str, Any]]) -> list[str]:
    """`rule: check` of every violation of the attempt kept (`compliance.solve`'s report)."""
    kept = next((a for a in reversed(report or []) if a.get("kept", True)), None)
    return [f"{v['rule']}: {v['check']}" for v in (kept or {}).get("violations", [])]


def score(
    domain: str,
    gold: str,
    solution: dict[str, Any] | None,
    status: str,
    chunks: dict[str, Any],
    refs: dict[str, Any],
    report: list[dict[str, Any]],
) -> dict[str, Any]:
    if not solution:
        return {"status": status or "none"}
    text = solution["text"]
    cited = solution.get("citations", [])
    row: dict[str, Any] = {
        "status": status,
        "violations": kept_violations(report),
        "attempts": len(report or []),
        "compliant": status in ("ok", "ungrounded"),
        "grounded": bool(cited),
        "quotes_written": len(cited) + len(solution.get("unverified", [])),
        "quotes_verified": len(cited),
        "chars": len(text),
        "text": text,
    }
    if domain == "medical":
        ref = refs.get(gold)
        if ref:
            hits = precaution_hits(ref["precautions"], text)
            row["precautions"] = [sum(hits), len(hits)]
        row["names_condition"] = names_condition(gold, text)
    else:
        ref = refs.get(gold)
        if ref:
            want = set(content_words(ref))
            have = set(content_words(text))
            row["answer_recall"] = round(len(want & have) / max(1, len(want)), 3)
        row["cites_section"] = any(
            c["chunk"] in chunks and chunk_label("tv", chunks[c["chunk"]], gold) == gold for c in cited
        )
    return row


def usage(kt: Any, label: str, kind: str) -> dict[str, Any]:
    """Calls and tokens of this label's runs of one kind (from the run ledger)."""
    total: collections.Counter[str] = collections.Counter()
    for r in kt.store.runs(label, limit=10000):
        if r["kind"] != kind:
            continue
        for key in ("calls", "cached", "input_tokens", "output_tokens"):
            total[key] += int((r.get("usage") or {}).get(key) or 0)
    return dict(total)


def summary(rows: list[dict[str, Any]], seconds: list[float], cost: dict[str, Any]) -> dict[str, Any]:
    made = [r for r in rows if "compliant" in r]
    n = max(1, len(made))
    out: dict[str, Any] = {
        "solutions": len(made),
        "malformed": sum(r.get("status") == "malformed" for r in rows),
        "compliant": round(sum(r["compliant"] for r in made) / n, 3),
        "grounded": round(sum(r["grounded"] for r in made) / n, 3),
        "quotes_verified": f"{sum(r['quotes_verified'] for r in made)}/{sum(r['quotes_written'] for r in made)}",
        "median_chars": statistics.median([r["chars"] for r in made]) if made else None,
        "median_s": round(statistics.median(seconds), 1) if seconds else None,
        **cost,
    }
    pre = [r["precautions"] for r in made if "precautions" in r]
    if pre:
        out["precaution_recall"] = round(sum(a for a, _ in pre) / max(1, sum(b for _, b in pre)), 3)
    if any("names_condition" in r for r in made):
        out["names_condition"] = round(sum(r["names_condition"] for r in made) / n, 3)
    if any("answer_recall" in r for r in made):
        out["answer_recall"] = round(statistics.mean(r["answer_recall"] for r in made), 3)
    if any("cites_section" in r for r in made):
        out["cites_section"] = round(sum(r["cites_section"] for r in made) / n, 3)
    if any("issue_hit" in r for r in rows):
        out["issue_hit"] = round(sum(r.get("issue_hit", False) for r in rows) / max(1, len(rows)), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--domain", choices=["tv", "medical"], default="medical")
    ap.add_argument("--db", required=True, help="a database holding the domain's KB (bench_autokb.py --db)")
    ap.add_argument("--model", default="local", help="the model that writes and checks every solution")
    ap.add_argument("--per-label", type=int, default=1, help="queries per label, first in file order")
    ap.add_argument("--limit", type=int, default=None, help="at most N queries in all")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of: " + ", ".join(ARMS))
    ap.add_argument("--metadata", choices=["keywords", "model", "none"], default="keywords")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if unknown := set(arms) - set(ARMS):
        raise SystemExit(f"--arms: unknown {sorted(unknown)}; use {', '.join(ARMS)}")
    sys.path.insert(0, str(ROOT / "src"))
    import knowtree
    from knowtree.construct.kb import compliance
    from knowtree.construct.kb.chunks import chunk_sections
    from knowtree.errors import ModelOutputError
    from knowtree.ingest.kb_inputs import load_kb_docs, load_rules
    from knowtree.records import KBIssue
    from knowtree.retrieve import LexicalIndex, Passage
    from knowtree.store import kb as kbstore

    files = domain_files(args.domain, None)
    labels = files["labels"]
    queries = pick(files["queries"], args.per_label, args.limit)
    rules = load_rules(files["rules"])
    if args.domain == "medical":
        refs = {r["label"]: r for r in read_jsonl(DATA / "medical_reference.jsonl")}
    else:
        refs = {q["text"]: q["answer"] for q in read_jsonl(DATA / "tv_queries.jsonl")}

    kt = knowtree.open(args.db, model=args.model)
    if args.domain not in kbstore.kb_names(kt.store):
        raise SystemExit(f"{args.db}: no KB named {args.domain!r}; build it with bench_autokb.py --db")
    kb = kt.kb(args.domain)
    kb_chunks = {c.id: c for c in kbstore.load_chunks(kt.store, args.domain)}
    raw_chunks = chunk_sections(load_kb_docs([str(d) for d in files["docs"]]))
    raw_by_id = {c.id: c for c in raw_chunks}
    lex = LexicalIndex(":memory:")
    if "raw-chunk RAG" in arms:
        lex.add([Passage(c.id, c.text, doc=c.doc_id) for c in raw_chunks])
    majority = {}
    for row in kb.export():
        c = collections.Counter(labels.get(m, "other") for m in row["members"])
        majority[row["id"]] = c.most_common(1)[0][0] if c else None

    rows: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
    seconds: dict[str, list[float]] = {a: [] for a in arms}
    # the rows quote the queries (dataset text): never write them into the repository by default
    target = Path(args.out) if args.out else Path(tempfile.gettempdir()) / f"kb_solutions_{args.domain}.json"
    target.parent.mkdir(parents=True, exist_ok=True)

    def one(arm: str, text: str, gold: str, ref: Any) -> dict[str, Any]:
        if arm == "KB":
            answer = kb.ask(text, k=5, metadata=args.metadata, solve=True)
            report = answer.issue.compliance if answer.issue else []
            row = score(args.domain, gold, answer.solution, answer.status, kb_chunks, {gold: ref}, report)
            row["issue"] = answer.issue.title if answer.issue else None
            row["issue_hit"] = bool(answer.issue) and majority.get(answer.issue.id) == gold
            return row
        issue = KBIssue(id="query", kind="parent", parent=None, cluster_id="", title=text, metadata={})
        shown = [] if arm == "own knowledge" else [raw_by_id[p] for p, _ in lex.search(text, 5)]
        with kt.run("kb-compare", f"compare:{args.domain}:{arm}", text) as run:
            solution, status, report = compliance.solve(run.client, args.domain, issue, shown, rules)
        return score(args.domain, gold, solution, status, raw_by_id, {gold: ref}, report)

    def results() -> dict[str, Any]:
        costs = {
            "own knowledge": usage(kt, f"compare:{args.domain}:own knowledge", "kb-compare"),
            "raw-chunk RAG": usage(kt, f"compare:{args.domain}:raw-chunk RAG", "kb-compare"),
            "KB": usage(kt, f"kb:{args.domain}", "kb-ask"),  # every ask of this KB: its lazy solutions
        }
        return {
            "domain": args.domain,
            "model": kt.model.id,
            "queries": len(queries),
            "per_label": args.per_label,
            "metadata": args.metadata,
            "summary": {a: summary(rows[a], seconds[a], costs[a]) for a in arms},
            "rows": rows,
        }

    for qi, (text, gold) in enumerate(queries, start=1):
        ref = refs.get(gold) if args.domain == "medical" else refs.get(text)
        for arm in arms:
            started = time.monotonic()
            try:
                row = one(arm, text, gold, ref)
            except ModelOutputError as exc:  # recorded, not dropped: the arm failed on this query
                row = {"status": "malformed", "error": str(exc)[:300]}
            seconds[arm].append(time.monotonic() - started)
            row.update(query=text, label=gold, seconds=round(seconds[arm][-1], 1))
            rows[arm].append(row)
            print(
                f"[{qi}/{len(queries)}] {arm}: {row.get('status')} "
                f"precautions={row.get('precautions')} {row['seconds']} s",
                file=sys.stderr,
            )
        target.write_text(json.dumps(results(), indent=2) + "\n")  # after every query: a crash keeps them
    out = results()
    kt.close()
    print(json.dumps(out["summary"], indent=2))
    target.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
