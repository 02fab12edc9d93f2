"""Tune the BM25 + embedding fusion (`retrieve/hybrid.py`) on a benchmark's dev data, LLM-free.

For every question the BM25 and the dense ranking (DEPTH deep) are computed once, from the same
indexes `knowtree eval --db` keeps; then every (RRF constant c, embedding weight w) of the grid fuses
them — score = 1/(c + rank_bm25) + w/(c + rank_dense) — and is scored with the harness's own metric
code (hit@5, hit within 1,024 / 2,048 tokens, all evidence within 1,024 tokens).

    PYTHONPATH=src python benchmarks/tune_fusion.py locomo ../shared/data/locomo_dev.json \
        --embedder m2v-minilm --db /tmp/idx.db --out /tmp/fusion-locomo.json

Tuned on dev data: the numbers it picks are dev numbers, not held-out ones.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from knowtree.retrieve.hybrid import reciprocal_rank_fusion
from knowtree_eval import metrics as m
from knowtree_eval.base import CorpusContext
from knowtree_eval.datasets import load_dataset
from knowtree_eval.scoring import evidence_labels

CS = (5, 10, 20, 30, 60, 100)
WEIGHTS = (0.0, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0)
DEPTH = 200


def score(ctx: CorpusContext, case, ranked: list[str]) -> dict[str, float | None]:
    labels = evidence_labels(ctx.corpus, ranked, case.evidence)
    lengths = [ctx.tokens(ctx.corpus.text(p)) for p in ranked]
    out: dict[str, float | None] = {"hit@5": m.hit_at_k(labels, case.evidence, 5)}
    for b in (1024, 2048):
        n = m.within_budget(lengths, b)
        out[f"hit@{b}"] = m.hit_at_k(labels, case.evidence, n)
        recall = m.recall_at_k(labels, case.evidence, n)
        out[f"all@{b}"] = None if recall is None else float(recall >= 1.0 - 1e-9)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind")
    parser.add_argument("path")
    parser.add_argument("--embedder", default="default")
    parser.add_argument("--db", default=":memory:", help="the SQLite file `knowtree eval --db` used")
    parser.add_argument("--out", help="write every grid point's means here (JSON)")
    args = parser.parse_args()

    dataset = load_dataset(args.kind, args.path)
    started = time.perf_counter()
    per_case = []  # (ctx, case, bm25 ranking, dense ranking)
    contexts: dict[str, CorpusContext] = {}
    for case in dataset.cases:
        if not case.evidence:
            continue
        ctx = contexts.get(case.corpus)
        if ctx is None:
            ctx = contexts[case.corpus] = CorpusContext(
                dataset.corpora[case.corpus], db=args.db, embedder=args.embedder
            )
        lexical = [pid for pid, _ in ctx.lexical().search(case.question, DEPTH)]
        dense = [pid for pid, _ in ctx.vectors().search(case.question, DEPTH)]
        per_case.append((ctx, case, lexical, dense))
    print(f"{len(per_case)} questions ranked in {time.perf_counter() - started:.1f}s")

    grid = []
    for c in CS:
        for w in WEIGHTS:
            sums: dict[str, list[float]] = {}
            for ctx, case, lexical, dense in per_case:
                fused = [pid for pid, _ in reciprocal_rank_fusion([lexical, dense], c, weights=(1.0, w))]
                for key, value in score(ctx, case, fused).items():
                    if value is not None:
                        sums.setdefault(key, []).append(value)
            means = {k: round(sum(v) / len(v), 4) for k, v in sums.items()}
            grid.append({"c": c, "embedding_weight": w, **means})
    dense_only = {}
    for ctx, case, _, dense in per_case:
        for key, value in score(ctx, case, dense).items():
            if value is not None:
                dense_only.setdefault(key, []).append(value)
    result = {
        "kind": args.kind,
        "path": args.path,
        "embedder": args.embedder,
        "questions": len(per_case),
        "dense_only": {k: round(sum(v) / len(v), 4) for k, v in dense_only.items()},
        "grid": grid,
    }
    for row in sorted(grid, key=lambda r: -(r.get("hit@1024") or 0))[:8]:
        print(row)
    print("dense only", result["dense_only"])
    print("bm25 only", next(r for r in grid if r["embedding_weight"] == 0.0))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    for ctx in contexts.values():
        ctx.close()


if __name__ == "__main__":
    main()
