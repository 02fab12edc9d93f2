"""LoCoMo session retrieval: BM25 over whole sessions fused with a dense max-sim over their turns.

An input for tree scoring (a session is an inner node, its turns the leaves). For every question the
sessions of one conversation are ranked by

* ``bm25``: FTS5 BM25 over each session's text (all its turns),
* ``maxsim``: the best cosine between the question and any of the session's turns,
* ``meansim``: the mean cosine over the session's turns,
* ``fused c/w``: reciprocal-rank fusion 1/(c + rank_bm25) + w/(c + rank_maxsim),

and scored by session Hit@1 / Hit@3 (a session holding an evidence turn is in the top 1 / 3).
Turn vectors come from the index `knowtree eval --db DB --embedder NAME` keeps (or are embedded).

    PYTHONPATH=src python benchmarks/bench_session_maxsim.py ../shared/data/locomo_dev.json \
        --embedder m2v-minilm --db /tmp/idx.db --out /tmp/maxsim.json

LLM-free; tuned settings chosen on this dev data are dev numbers.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from knowtree.retrieve.bm25 import LexicalIndex, Passage
from knowtree.retrieve.hybrid import reciprocal_rank_fusion
from knowtree_eval.base import CorpusContext
from knowtree_eval.datasets import load_locomo

GRID = [(c, w) for c in (5, 10, 30, 60) for w in (0.2, 0.3, 0.5, 1.0, 1.5, 2.0)]


def hits(ranking: list[str], gold: set[str]) -> tuple[float, float]:
    return float(bool(set(ranking[:1]) & gold)), float(bool(set(ranking[:3]) & gold))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--embedder", default="default")
    parser.add_argument("--db", default=":memory:")
    parser.add_argument("--out")
    args = parser.parse_args()
    import numpy as np

    dataset = load_locomo(args.path)
    scores: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for corpus_id, corpus in dataset.corpora.items():
        ctx = CorpusContext(corpus, db=args.db, embedder=args.embedder)
        vectors = ctx.vectors()
        sessions: dict[str, list[str]] = defaultdict(list)
        for pid, passage in corpus.passages.items():
            sessions[passage.doc].append(pid)
        lexical = LexicalIndex(":memory:", name="sessions")
        lexical.add(
            [Passage(s, "\n".join(corpus.text(p) for p in pids)) for s, pids in sessions.items()]
        )
        ids = list(corpus.passages)
        for case in dataset.cases:
            if case.corpus != corpus_id or not case.evidence:
                continue
            gold = {corpus.passages[e].doc for e in case.evidence if e in corpus.passages}
            if not gold:
                continue
            bm25 = [s for s, _ in lexical.search(case.question, len(sessions))]
            sims = dict(vectors.search(case.question, len(ids)))
            best: dict[str, float] = {}
            mean: dict[str, float] = {}
            for s, pids in sessions.items():
                best[s] = max(sims.get(p, -1.0) for p in pids)
                mean[s] = float(np.mean([sims.get(p, 0.0) for p in pids]))
            maxsim = sorted(best, key=lambda s: -best[s])
            meansim = sorted(mean, key=lambda s: -mean[s])
            scores["bm25"].append(hits(bm25, gold))
            scores["maxsim"].append(hits(maxsim, gold))
            scores["meansim"].append(hits(meansim, gold))
            for c, w in GRID:
                fused = [s for s, _ in reciprocal_rank_fusion([bm25, maxsim], c, weights=(1.0, w))]
                scores[f"fused c={c} w={w}"].append(hits(fused, gold))
        lexical.close()
        ctx.close()
    table = {
        name: {
            "hit@1": round(sum(h for h, _ in v) / len(v), 4),
            "hit@3": round(sum(h for _, h in v) / len(v), 4),
            "n": len(v),
        }
        for name, v in scores.items()
    }
    for name, row in sorted(table.items(), key=lambda kv: -kv[1]["hit@1"])[:10]:
        print(f"{name:22s} {row}")
    for name in ("bm25", "maxsim", "meansim"):
        print(f"{name:22s} {table[name]}")
    if args.out:
        Path(args.out).write_text(json.dumps({"embedder": args.embedder, "table": table}, indent=1))


if __name__ == "__main__":
    main()
