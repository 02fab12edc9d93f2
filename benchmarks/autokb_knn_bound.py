"""AutoKB: how far ranking by text similarity can go at all, from the dev labels (a reference, not a method).

A KB issue is a hit when its members' majority label is the query's, so a KB built from these raw
issues and ranked by a similarity between texts approximates, at best, a classifier that sees the
raw issues *with their true labels* and votes among the query's k most similar ones (not a strict
bound: another rule could be luckier on a few queries). This script is that classifier: for each
dev query, the raw issues are scored by the KB's own passage similarity
(`retrieve.similarity.PassageSimilarity`: mean-centred dense cosine and TF-IDF, `--dense-weights`)
or by BM25 (the flat baseline's FTS5 index over the raw issues), the top k vote with their dev
labels (a raw issue without one votes for a label of its own, as the scoring's "other" cannot
match a query), and the query counts as right when the winning label is its own. Votes are plain
counts or similarity-weighted sums; k = 1 is the nearest raw issue.

    python benchmarks/autokb_knn_bound.py --domain medical
    python benchmarks/autokb_knn_bound.py --domain tv --embedder minilm

No KB is built and no model is called.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_autokb import domain_files, read_jsonl  # noqa: E402

KS = (1, 3, 5, 10, 15, 20)


def bm25_scores(texts: list[str], queries: list[str]) -> list[list[float]]:
    """BM25 of each query against every text, by the flat baseline's index (`LexicalIndex`, FTS5);
    texts it does not match score 0."""
    from knowtree.retrieve import LexicalIndex, Passage

    lex = LexicalIndex(":memory:")
    lex.add([Passage(str(i), t) for i, t in enumerate(texts)])
    out = []
    for q in queries:
        row = [0.0] * len(texts)
        for pid, score in lex.search(q, max(KS)):
            row[int(pid)] = float(score)
        out.append(row)
    return out


def vote(scores: list[float], labels: list[str], k: int, weighted: bool) -> str:
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[:k]
    tally: collections.Counter[str] = collections.Counter()
    for i in order:
        tally[labels[i]] += max(scores[i], 0.0) if weighted else 1.0
    return tally.most_common(1)[0][0] if tally else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--domain", choices=["tv", "medical"], default="medical")
    ap.add_argument("--embedder", default="default", help="knowtree embedder name (default: the project's)")
    ap.add_argument("--dense-weights", default="0,0.5,1", help="PassageSimilarity dense weights to score")
    ap.add_argument("--out", type=Path, default=None, help="write the table as JSON here")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    import numpy as np

    from knowtree.retrieve.embed import get_embedder
    from knowtree.retrieve.similarity import PassageSimilarity

    files = domain_files(args.domain, None)
    raw = read_jsonl(files["issues"])
    texts = [r["text"] for r in raw]
    labels = [files["labels"].get(r["id"], "unlabelled:" + r["id"]) for r in raw]
    queries: list[tuple[str, str]] = files["queries"]

    scorers: dict[str, list[list[float]]] = {"BM25": bm25_scores(texts, [q for q, _ in queries])}
    embedder = get_embedder(None if args.embedder == "default" else args.embedder)
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    qvectors = np.asarray(embedder.embed([q for q, _ in queries]), dtype=np.float32)
    sim = PassageSimilarity(texts, vectors, [str(i) for i in range(len(texts))])
    for w in (float(x) for x in args.dense_weights.split(",")):
        scorers[f"similarity w={w:g} ({args.embedder})"] = [
            sim.scores(q, qvectors[i], w).tolist() for i, (q, _) in enumerate(queries)
        ]

    rows = []
    print(
        f"{args.domain}: {len(queries)} queries, {len(texts)} raw issues, HitRate@1 of a k-NN vote with the true labels"
    )
    print(f"{'scored by':<40} {'vote':<9} " + " ".join(f"k={k:<4}" for k in KS))
    for name, per_query in scorers.items():
        for weighted in (False, True):
            accs = []
            for k in KS:
                right = sum(
                    vote(s, labels, k, weighted) == gold
                    for s, (_, gold) in zip(per_query, queries, strict=True)
                )
                accs.append(right / len(queries))
            kind = "weighted" if weighted else "count"
            rows.append(
                {"scored_by": name, "vote": kind, **{f"k{k}": a for k, a in zip(KS, accs, strict=True)}}
            )
            print(f"{name:<40} {kind:<9} " + " ".join(f"{a:.3f}" for a in accs))
    if args.out:
        args.out.write_text(json.dumps({"domain": args.domain, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
