"""The two indexes of a knowledge base: its issue nodes and its contextualized document chunks, each
a hybrid (BM25 + dense, fused by reciprocal rank) index. Both live in the KB's database file, in
tables named after a hash of the KB name (index names allow only letters, digits and '_').

Issue nodes are ranked in two steps:
* semantic: every issue passage (an issue's title and each member text) is scored by
  `retrieve/similarity.py`: `DENSE_WEIGHT` × the cosine of mean-centred dense vectors (centre: the
  mean of the indexed passages' vectors) + (1 − `DENSE_WEIGHT`) × a TF-IDF cosine fitted on the
  indexed passages; an issue takes its best passage's score. The fit is cached (an LRU of 8, keyed
  by the index and its version) and redone when the index changes (`kb add`, another process's
  included). `DENSE_WEIGHT = "hybrid"` ranks by the hybrid index's fused ranks instead (the
  earlier ranking, kept to compare).
* grounding, rolled up: at build time each issue's member texts are searched in the chunks (BM25)
  and the chunks found are kept on the issue's title passage (`meta["grounding"]`: chunk id →
  weight). A query then scores an issue by 1/(c + its semantic rank) plus `ROLLUP_WEIGHT` × the
  reciprocal ranks of its grounding chunks in the query's chunk ranking, so a query worded like
  the manual finds the issues grounded in that part of it.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from knowtree.retrieve.bm25 import LexicalIndex, Passage
from knowtree.retrieve.embed import Embedder, get_embedder
from knowtree.retrieve.hybrid import HybridIndex
from knowtree.retrieve.similarity import FitCache, PassageSimilarity
from knowtree.retrieve.vectors import VectorIndex

GROUND_K = 3  # chunks each member text is grounded in (BM25 top-k, weighted 1/rank)
GROUND_TEXTS = 10  # member texts of an issue used for its grounding
# Weight of the chunk roll-up against the issue's own rank. Set on half 0 of the dev queries of both
# domains (benchmarks/RESULTS.md, AutoKB: the split and both halves are reported); 0 turns it off.
ROLLUP_WEIGHT = 0.25
ROLLUP_DEPTH = 50
# Semantic step of the issue ranking: the weight of the dense side of `PassageSimilarity` (the rest
# is TF-IDF), or "hybrid" for the BM25 + dense reciprocal-rank fusion. Set on half 0 of the dev
# queries of both domains (benchmarks/RESULTS.md, AutoKB).
DENSE_WEIGHT: float | Literal["hybrid"] = 0.5
FITS = FitCache(8)  # fitted issue similarities, by (index, embedder, index version)


class KBIndexes:
    def __init__(self, path: str | Any, kb: str, embedder: Embedder | str | None = None) -> None:
        """`path`: an SQLite file, ":memory:", or a PostgreSQL store (store/flatindex.py)."""
        self.embedder = (
            embedder if isinstance(embedder, Embedder) else get_embedder(*([embedder] if embedder else []))
        )
        tag = "kb_" + hashlib.sha256(kb.encode("utf-8")).hexdigest()[:12]
        # what a fitted similarity is cached under: the file (an in-memory index is this object's own)
        self._where = (
            "memory:" + uuid.uuid4().hex
            if path == ":memory:"
            else os.path.abspath(path)
            if isinstance(path, str)
            else str(path.path)
        )
        self._lex = {part: LexicalIndex(path, name=f"{tag}_{part}") for part in ("issues", "chunks")}
        self._vec = {
            part: VectorIndex(path, name=f"{tag}_{part}", embedder=self.embedder)
            for part in ("issues", "chunks")
        }
        self.issues = HybridIndex(self._lex["issues"], self._vec["issues"])
        self.chunks = HybridIndex(self._lex["chunks"], self._vec["chunks"])
        # chunk → [(issue, weight)], with the issue index version it was read at (another process's
        # `kb add` changes the version; this object's own adds reset it)
        self._grounded: dict[str, list[tuple[str, float]]] | None = None
        self._grounded_at: tuple[int, int, int] = (-1, -1, -1)

    def add(self, part: str, passages: Sequence[Passage]) -> None:
        """Index (or re-index, same id) passages in `issues` or `chunks`."""
        self._lex[part].add(passages)
        self._vec[part].add(passages)
        self._grounded = None

    def reset(self, part: str) -> None:
        self._lex[part].clear()
        self._vec[part].clear()
        self._grounded = None

    def count(self, part: str) -> int:
        return len(self._lex[part])

    def lexical(self, part: str) -> LexicalIndex:
        return self._lex[part]

    def dense(self, part: str) -> VectorIndex:
        return self._vec[part]

    # -- grounding and issue ranking ---------------------------------------------------------------
    def ground(self, texts: Sequence[str], k: int = GROUND_K) -> dict[str, float]:
        """Chunk id → weight: the mean over the texts (the first GROUND_TEXTS) of 1/rank in each
        text's BM25 top-k over the chunks. Empty when no chunk is indexed."""
        texts = [t for t in texts if t.strip()][:GROUND_TEXTS]
        if not texts or not self.count("chunks"):
            return {}
        weights: dict[str, float] = {}
        for text in texts:
            for rank, (cid, _) in enumerate(self._lex["chunks"].search(text, k), start=1):
                weights[cid] = weights.get(cid, 0.0) + 1.0 / rank / len(texts)
        return {cid: round(w, 4) for cid, w in weights.items()}

    def _grounding(self, version: tuple[int, int, int] | None = None) -> dict[str, list[tuple[str, float]]]:
        version = self._lex["issues"].version() if version is None else version
        if self._grounded is None or self._grounded_at != version:
            inverse: dict[str, list[tuple[str, float]]] = {}
            for passage in self._lex["issues"].passages():
                # member passages (ISSUE|RAW) carry no grounding; the title passage does
                for cid, w in (passage.meta.get("grounding") or {}).items():
                    inverse.setdefault(cid, []).append((passage.id, float(w)))
            self._grounded, self._grounded_at = inverse, version
        return self._grounded

    def similarity(self, version: tuple[int, int, int] | None = None) -> PassageSimilarity:
        """The issue passages' similarity (groups: issue ids), fitted once per index version
        (`version`: the issue index's, already read by the caller)."""
        lex = self._lex["issues"]
        key = (self._where, lex.name, self.embedder.id, lex.version() if version is None else version)
        return FITS.get(key, self._fit)  # type: ignore[return-value]

    def _fit(self) -> PassageSimilarity:
        import numpy as np

        ids, matrix = self._vec["issues"].vectors()
        row = {pid: i for i, pid in enumerate(ids)}
        passages = [p for p in self._lex["issues"].passages() if p.id in row]
        vectors = matrix[[row[p.id] for p in passages]] if passages else np.zeros((0, self.embedder.dim))
        groups = [p.id.split("|", 1)[0] for p in passages]
        return PassageSimilarity([p.text for p in passages], vectors.astype(np.float32), groups)

    def semantic(
        self,
        query: str,
        depth: int,
        dense_weight: float | Literal["hybrid"] | None = None,
        version: tuple[int, int, int] | None = None,
    ) -> list[str]:
        """The `depth` best issue ids for the query by the semantic step (see the module docstring;
        `dense_weight` None: the module's DENSE_WEIGHT, read at call time)."""
        weight = DENSE_WEIGHT if dense_weight is None else dense_weight
        if weight == "hybrid":
            nodes: dict[str, None] = {}
            for pid, _ in self.issues.search(query, depth):
                nodes.setdefault(pid.split("|", 1)[0], None)
            return list(nodes)
        sim = self.similarity(version)
        if not len(sim):
            return []
        query_vector = self.embedder.embed([query])[0]
        return [node for node, _ in sim.best(query, query_vector, float(weight), k=depth)]

    def rank_issues(
        self,
        query: str,
        *,
        depth: int = ROLLUP_DEPTH,
        rollup: float | None = None,
        dense_weight: float | Literal["hybrid"] | None = None,
    ) -> list[tuple[str, float]]:
        """Issue ids best first: 1/(c + the issue's rank in the semantic step) + rollup × Σ
        weight/(c + rank) over its grounding chunks in the query's BM25 chunk ranking (`rollup`,
        `dense_weight` None: the module's ROLLUP_WEIGHT, DENSE_WEIGHT, read at call time)."""
        rollup = ROLLUP_WEIGHT if rollup is None else rollup
        c = self.issues.c
        version = self._lex["issues"].version()  # one read of it for both steps (a scan of the table)
        semantic = self.semantic(query, depth, dense_weight, version)
        scores = {node: 1.0 / (c + rank) for rank, node in enumerate(semantic, 1)}
        grounded = self._grounding(version) if rollup else {}
        if grounded:
            for rank, (cid, _) in enumerate(self._lex["chunks"].search(query, depth), start=1):
                for node, w in grounded.get(cid, ()):
                    scores[node] = scores.get(node, 0.0) + rollup * w / (c + rank)
        return sorted(scores.items(), key=lambda kv: -kv[1])

    def close(self) -> None:
        for idx in (*self._lex.values(), *self._vec.values()):
            idx.close()
