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
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True)
    ap.add_argument("--tree", default="t")
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("-k", type=int, default=256)
    ap.add_argument(
        "--shared",
        action="store_true",
        help="also the shared per-size index main had (made here over every vector, dropped after)",
    )
    args = ap.parse_args()

    from knowtree.core import KnowTree
    from knowtree.retrieve.embed import get_embedder
    from knowtree.testing.models import KeywordModel

    embedder = get_embedder()
    exacts: list[list[str]] = []
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
            exacts.append(best)
        if args.shared:  # the tree's own index set aside while main's shared one answers
            _shared_phase(args, index, embedder, questions, exacts, out)
    print(
        json.dumps(
            {
                "shared_top10_overlap": round(statistics.mean(out.get("shared_top10", [0])), 3),
                "shared_topk_overlap": round(statistics.mean(out.get("shared_topk", [0])), 3),
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


def _shared_phase(args: Any, index: Any, embedder: Any, questions: list[str], exacts: list[list[str]], out: Any) -> None:
    import psycopg

    from knowtree.store.pgbulk import ann_index_name

    own = ann_index_name(args.tree, embedder.id, embedder.dim)
    with psycopg.connect(args.db, autocommit=True) as conn:
        definition = conn.execute("SELECT pg_get_indexdef(to_regclass(%s))", (own,)).fetchone()[0]
        conn.execute(f"DROP INDEX {own}")
        conn.execute("SET maintenance_work_mem = '2GB'")
        conn.execute(
            "CREATE INDEX bench_shared_hnsw ON tree_index_vec USING hnsw"
            f" ((emb::vector({embedder.dim})) vector_ip_ops) WHERE vector_dims(emb) = {embedder.dim}"
        )
    try:
        for q, best in zip(questions, exacts, strict=True):
            query = embedder.embed([q])[0]
            got = index.store.read(lambda c, v=query: _shared_top(c, args.tree, embedder, v, 2 * args.k))
            ids = [i for i, _ in sorted(got, key=lambda r: -r[1])[: args.k]]
            out.setdefault("shared_top10", []).append(len(set(best[:10]) & set(ids[:10])) / 10)
            out.setdefault("shared_topk", []).append(len(set(best) & set(ids)) / max(1, len(best)))
    finally:
        with psycopg.connect(args.db, autocommit=True) as conn:
            conn.execute("DROP INDEX IF EXISTS bench_shared_hnsw")
            conn.execute("SET maintenance_work_mem = '2GB'")
            conn.execute(definition)


def _shared_top(conn: object, tree: str, embedder: object, query: object, k: int) -> list[tuple[str, float]]:
    """main's query (1b105f3 `treeindex_pg.ann_top`) on the shared per-size index."""
    from knowtree.store.treeindex_pg import EF_MIN, vector_literal

    dim = embedder.dim  # type: ignore[attr-defined]
    conn.execute(f"SET LOCAL hnsw.ef_search = {min(1000, max(EF_MIN, int(k)))}")  # type: ignore[attr-defined]
    conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")  # type: ignore[attr-defined]
    conn.execute("SET LOCAL enable_sort = off")  # type: ignore[attr-defined]
    return conn.execute(  # type: ignore[attr-defined]
        f"SELECT v.id, -(v.emb::vector({dim}) <#> ?::vector({dim})) FROM tree_index_vec v"
        " JOIN tree_index t ON t.tree = v.tree AND t.id = v.id AND t.body_hash = v.hash"
        f" WHERE v.tree = ? AND v.embedder = ? AND vector_dims(v.emb) = {dim}"
        f" ORDER BY v.emb::vector({dim}) <#> ?::vector({dim}) LIMIT ?",
        (vector_literal(query), tree, embedder.id, vector_literal(query), int(k)),  # type: ignore[attr-defined]
    ).fetchall()


if __name__ == "__main__":
    main()
