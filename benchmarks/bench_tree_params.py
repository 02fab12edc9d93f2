"""Ablations of the `tree` eval method's scoring: BM25 vs dense mix, path smoothing, repeat decay.

    PYTHONPATH=src python benchmarks/bench_tree_params.py KIND [--embedder default|none] PARAMS_JSON...

e.g. `... locomo '{"parent_weight": 0}' '{"parent_weight": 0.8}'`: each JSON object overrides fields of
the kind's default `ScoreParams` (retrieve/treesearch.py). The zero-call tree and its index are built
once per corpus; every parameter set ranks the same questions, and prints hit rate ("any gold
evidence") and all-hit ("every gold passage") within 512 / 1,024 / 2,048 tokens, counted like
`knowtree eval` does. Data: ../shared/data (never copied into the repo).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from knowtree.retrieve.treesearch import default_params, rank_tree
from knowtree_eval.base import CorpusContext
from knowtree_eval.datasets import load_dataset
from knowtree_eval.methods import make_method
from knowtree_eval.scoring import retrieval_metrics
from knowtree_eval.treemethod import TreeMethod

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
FILES = {
    "locomo": "locomo_dev.json",
    "hotpotqa": "hotpotqa_dev.json",
    "financebench": "financebench_dev_questions.jsonl",
    "quality": "quality_dev.jsonl",
}
SHOWN = tuple(f"{m}_b{b}" for m in ("hit", "all") for b in (512, 1024, 2048, 4096))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=sorted(FILES))
    ap.add_argument("params", nargs="*", default=["{}"])
    ap.add_argument("--embedder", default="default", help='"none": BM25 only')
    ap.add_argument("--data", default=None)
    ap.add_argument(
        "--flat",
        default="",
        help="same-unit flat methods to score beside (e.g. flat-bm25,flat-fused-ctx: `knowtree_eval.flatpieces`)",
    )
    ap.add_argument("--corpora", type=int, default=None, help="only the first N corpora")
    ap.add_argument(
        "--embed-text-only",
        action="store_true",
        help="the tree's pieces are embedded without their context (BM25 still indexes it)",
    )
    ap.add_argument(
        "--flat-pieces", action="store_true", help="baseline: BM25 over the same pieces, no context, no tree"
    )
    args = ap.parse_args()
    if args.flat_pieces:
        flat_pieces(args.kind, args.data)
        return
    dense = args.embedder != "none"
    if args.embed_text_only:
        _embed_text_only()
    grid = [json.loads(p) for p in args.params]
    ds = load_dataset(args.kind, args.data or DATA / FILES[args.kind])
    flats = [make_method(n) for n in args.flat.split(",") if n.strip()]
    sums: list[dict[str, list[float]]] = [{} for _ in [*grid, *flats]]
    started = time.perf_counter()
    for cid, corpus in list(ds.corpora.items())[: args.corpora]:
        ctx = CorpusContext(corpus, embedder=args.embedder if dense else "default")
        method = TreeMethod(use_dense=dense)
        method.prepare(ctx)
        built = method.built(ctx)
        for case in (c for c in ds.cases if c.corpus == cid):
            for out, overrides in zip(sums[: len(grid)], grid, strict=True):
                params = dataclasses.replace(default_params(built.kind), **overrides)
                ranking = rank_tree(
                    built.index, case.question, embedder=method.embedder, params=params, shape=built.shape
                )
                ranked = [built.piece_passage[p] for p in ranking.pieces]
                lengths = [built.piece_tokens[p] for p in ranking.pieces]
                metrics = retrieval_metrics(case, ctx, ranked, k=5, budget=2048, lengths=lengths)
                for key, value in metrics.items():
                    if value is not None:
                        out.setdefault(key, []).append(value)
            for out, flat in zip(sums[len(grid) :], flats, strict=True):
                for key, value in flat.run(case, ctx).metrics.items():
                    if value is not None:
                        out.setdefault(key, []).append(value)
        ctx.close()
    for overrides, out in zip([*grid, *(f.name for f in flats)], sums, strict=True):
        shown = " ".join(f"{k}={sum(out[k]) / len(out[k]):.3f}" for k in SHOWN if out.get(k))
        print(json.dumps(overrides), shown)
    print(f"{args.kind}, embedder {args.embedder}: {time.perf_counter() - started:.0f}s")


def _embed_text_only() -> None:
    """Patch the index's embedding step: a piece's vector from its text alone (inner nodes keep theirs)."""
    import dataclasses as dc

    import knowtree.retrieve.treeindex as treeindex

    embed_rows = treeindex.embed_rows

    def text_only(embedder, rows, batch=256):  # type: ignore[no-untyped-def]
        return embed_rows(embedder, [dc.replace(r, context="") if r.leaf else r for r in rows], batch)

    treeindex.embed_rows = text_only


def flat_pieces(kind: str, data: str | None) -> None:
    """The control for piece size: each passage cut into the same pieces, ranked by BM25 alone."""
    from knowtree.retrieve.bm25 import LexicalIndex, Passage
    from knowtree.retrieve.context import split_pieces

    ds = load_dataset(kind, data or DATA / FILES[kind])
    out: dict[str, list[float]] = {}
    for cid, corpus in ds.corpora.items():
        ctx = CorpusContext(corpus)
        of: dict[str, str] = {}
        with LexicalIndex(":memory:") as index:
            pieces = []
            for pid, passage in corpus.passages.items():
                for j, (_, text) in enumerate(split_pieces(passage.text) or [(0, passage.text)]):
                    of[f"{pid}##{j}"] = pid
                    pieces.append(Passage(f"{pid}##{j}", text))
            index.add(pieces)
            texts = {p.id: p.text for p in pieces}
            for case in (c for c in ds.cases if c.corpus == cid):
                ranked = [p for p, _ in index.search(case.question, 5000)]
                lengths = [ctx.tokens(texts[p]) for p in ranked]
                metrics = retrieval_metrics(
                    case, ctx, [of[p] for p in ranked], k=5, budget=2048, lengths=lengths
                )
                for key, value in metrics.items():
                    if value is not None:
                        out.setdefault(key, []).append(value)
    print("flat BM25 pieces", " ".join(f"{k}={sum(out[k]) / len(out[k]):.3f}" for k in SHOWN if out.get(k)))


if __name__ == "__main__":
    main()
