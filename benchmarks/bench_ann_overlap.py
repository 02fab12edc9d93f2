"""How well a PostgreSQL tree's approximate dense top-k (its HNSW index: `TreeIndex.dense_top` on the
approximate path) agrees with the exact one (every vector scored in process), on a tree that
`bench_scale_index.py --pg-dir` built: the mean overlap of the top-10 and top-k sets over questions
naming the corpus's leaves, and the median time of each way.

    PYTHONPATH=src python benchmarks/bench_ann_overlap.py --db 'postgresql://…/e9_100000?host=…' --questions 40
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True)
    ap.add_argument("--tree", default="t")
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("-k", type=int, default=256)
    args = ap.parse_args()

    from knowtree.core import KnowTree
    from knowtree.retrieve.embed import get_embedder
    from knowtree.testing.models import KeywordModel

    embedder = get_embedder()
    with KnowTree(args.db, model=KeywordModel()) as kt:
        index = kt.tree_index(args.tree)
        rows = index.store.read(
            lambda c: c.execute(
                "SELECT text FROM tree_index WHERE tree = ? AND leaf = 1 ORDER BY id LIMIT ?",
                (args.tree, args.questions),
            ).fetchall()
        )
        questions = [f"what about {r[0][:80]}?" for r in rows]
        out: dict[str, list[float]] = {"top10": [], "topk": [], "ann_ms": [], "exact_ms": []}
        for q in questions:
            os.environ["KNOWTREE_ANN_ENTRIES"] = "0"
            started = time.perf_counter()
            near, _, _ = index.dense_top(q, embedder, args.k)
            out["ann_ms"].append(1000 * (time.perf_counter() - started))
            os.environ["KNOWTREE_ANN_ENTRIES"] = str(10**12)
            started = time.perf_counter()
            exact, _, _ = index.dense_top(q, embedder, args.k)
            out["exact_ms"].append(1000 * (time.perf_counter() - started))
            best = sorted(exact, key=lambda i: -exact[i])
            got = sorted(near, key=lambda i: -near[i])
            out["top10"].append(len(set(best[:10]) & set(got[:10])) / 10)
            out["topk"].append(len(set(best) & set(got)) / max(1, len(best)))
    print(
        json.dumps(
            {
                "entries": index.entries,
                "questions": len(questions),
                "k": args.k,
                "top10_overlap": round(statistics.mean(out["top10"]), 3),
                "topk_overlap": round(statistics.mean(out["topk"]), 3),
                "ann_ms_median": round(statistics.median(out["ann_ms"]), 1),
                "exact_ms_median": round(statistics.median(out["exact_ms"][1:] or out["exact_ms"]), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
