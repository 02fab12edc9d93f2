"""AutoKB: an upper bound for reranking the top 5 KB issues, from the dev labels (not a method).

For each dev query, the top-5 KB issues of Algorithm 2 are retrieved; then every member raw issue of
those issues that has a TRUE dev label votes with it ("vote"; members without one do not vote). The
query counts as right when the label with the most votes is the query's (a tie: not right).
"vote_with_other" lets the unlabelled members vote "other" too, as the scoring counts them.
This shows what a reranker of the top 5 that saw the members' true labels could reach: the room
left between HitRate@1 and HitRate@5 for an LLM rerank.

    python benchmarks/bench_autokb.py --domain tv --model keyword --db /tmp/tv.db --no-baselines   # builds
    python benchmarks/autokb_vote_bound.py --domain tv --db /tmp/tv.db

Needs a KB built by bench_autokb.py in `--db` (same domain, same name). Also reports, for
comparison, the HitRate@1 and @5 of the same rankings.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_autokb import dense_weight, domain_files, half  # noqa: E402


def majority_right(votes: collections.Counter[str], gold: str) -> bool:
    top = votes.most_common(2)
    if not top:
        return False
    return top[0][0] == gold and (len(top) == 1 or top[1][1] < top[0][1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--domain", choices=["tv", "medical"], default="tv")
    ap.add_argument("--db", required=True, help="the database bench_autokb.py built the KB in")
    ap.add_argument("--metadata", choices=["keywords", "none"], default="keywords")
    ap.add_argument("--dense-weight", default=None, help="kbindex.DENSE_WEIGHT: W in [0, 1] or 'hybrid'")
    ap.add_argument("--k", type=int, default=5)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    import knowtree
    from knowtree.retrieve import kbindex

    if args.dense_weight is not None:
        kbindex.DENSE_WEIGHT = dense_weight(args.dense_weight)
    files = domain_files(args.domain, None)
    labels: dict[str, str] = files["labels"]
    kt = knowtree.open(args.db, model="keyword")
    kb = kt.kb(args.domain)
    members = {row["id"]: row["members"] for row in kb.export()}
    majority = {}
    for iid, ms in members.items():
        c = collections.Counter(labels.get(m, "other") for m in ms)
        majority[iid] = c.most_common(1)[0][0] if c else None
    rows: list[dict[str, Any]] = []
    for text, gold in files["queries"]:
        answer = kb.ask(text, k=args.k, metadata=args.metadata, solve=False)
        ids = [a.issue.id for a in answer.accepted][: args.k]
        votes = collections.Counter(labels.get(m, "other") for i in ids for m in members.get(i, []))
        labelled = collections.Counter({label: n for label, n in votes.items() if label != "other"})
        rows.append(
            {
                "half": half(text),
                "vote": majority_right(labelled, gold),
                "vote_with_other": majority_right(votes, gold),
                "@1": bool(ids) and majority.get(ids[0]) == gold,
                f"@{args.k}": any(majority.get(i) == gold for i in ids),
            }
        )
    kt.close()

    def rates(sel: list[dict[str, Any]]) -> dict[str, Any]:
        n = max(1, len(sel))
        return {
            "n": len(sel),
            **{
                key: round(sum(r[key] for r in sel) / n, 3)
                for key in ("vote", "vote_with_other", "@1", f"@{args.k}")
            },
        }

    out = {
        "domain": args.domain,
        "dense_weight": kbindex.DENSE_WEIGHT,
        "metadata": args.metadata,
        "all": rates(rows),
        "half0": rates([r for r in rows if r["half"] == 0]),
        "half1": rates([r for r in rows if r["half"] == 1]),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
