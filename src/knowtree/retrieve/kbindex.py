"""The two hybrid (BM25 + dense, fused by reciprocal rank) indexes of a knowledge base: its issue
nodes and its contextualized document chunks. Both live in the KB's database file, in tables named
after a hash of the KB name (index names allow only letters, digits and '_').

Issue nodes are ranked with their grounding (contextual retrieval, rolled up): at build time each
issue's member texts are searched in the chunks (BM25) and the chunks found are kept on the issue's
title passage (`meta["grounding"]`: chunk id → weight). A query then scores an issue by its own
fused rank plus `ROLLUP_WEIGHT` × the fused reciprocal ranks of its grounding chunks in the query's
chunk ranking, so a query worded like the manual finds the issues grounded in that part of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from knowtree.retrieve.bm25 import LexicalIndex, Passage
from knowtree.retrieve.embed import Embedder, get_embedder
from knowtree.retrieve.hybrid import HybridIndex
from knowtree.retrieve.vectors import VectorIndex

GROUND_K = 3  # chunks each member text is grounded in (BM25 top-k, weighted 1/rank)
GROUND_TEXTS = 10  # member texts of an issue used for its grounding
# Weight of the chunk roll-up against the issue's own rank. Set on half 0 of the dev queries of both
# domains (benchmarks/RESULTS.md, AutoKB: the split and both halves are reported); 0 turns it off.
ROLLUP_WEIGHT = 0.25
ROLLUP_DEPTH = 50


class KBIndexes:
    def __init__(self, path: str, kb: str, embedder: Embedder | str | None = None) -> None:
        self.embedder = (
            embedder if isinstance(embedder, Embedder) else get_embedder(*([embedder] if embedder else []))
        )
        tag = "kb_" + hashlib.sha256(kb.encode("utf-8")).hexdigest()[:12]
        self._lex = {part: LexicalIndex(path, name=f"{tag}_{part}") for part in ("issues", "chunks")}
        self._vec = {
            part: VectorIndex(path, name=f"{tag}_{part}", embedder=self.embedder)
            for part in ("issues", "chunks")
        }
        self.issues = HybridIndex(self._lex["issues"], self._vec["issues"])
        self.chunks = HybridIndex(self._lex["chunks"], self._vec["chunks"])
        # chunk → [(issue, weight)], with the issue passage count it was read at (another process's
        # `kb add` changes the count; this object's own adds reset it)
        self._grounded: dict[str, list[tuple[str, float]]] | None = None
        self._grounded_at = -1

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

    def _grounding(self) -> dict[str, list[tuple[str, float]]]:
        count = self.count("issues")
        if self._grounded is None or self._grounded_at != count:
            inverse: dict[str, list[tuple[str, float]]] = {}
            lex = self._lex["issues"]
            for pid in lex:
                if "|" in pid:  # member passages carry no grounding; the title passage does
                    continue
                passage = lex.get(pid)
                for cid, w in ((passage.meta if passage else {}).get("grounding") or {}).items():
                    inverse.setdefault(cid, []).append((pid, float(w)))
            self._grounded, self._grounded_at = inverse, count
        return self._grounded

    def rank_issues(
        self, query: str, *, depth: int = ROLLUP_DEPTH, rollup: float | None = None
    ) -> list[tuple[str, float]]:
        """Issue ids best first: 1/(c + the issue's rank by its best passage in the hybrid search)
        + rollup × Σ weight/(c + rank) over its grounding chunks in the query's BM25 chunk ranking
        (`rollup` None: the module's ROLLUP_WEIGHT, read at call time)."""
        rollup = ROLLUP_WEIGHT if rollup is None else rollup
        c = self.issues.c
        scores: dict[str, float] = {}
        for pid, _ in self.issues.search(query, depth):
            node = pid.split("|", 1)[0]
            if node not in scores:
                scores[node] = 1.0 / (c + len(scores) + 1)
        grounded = self._grounding() if rollup else {}
        if grounded:
            for rank, (cid, _) in enumerate(self._lex["chunks"].search(query, depth), start=1):
                for node, w in grounded.get(cid, ()):
                    scores[node] = scores.get(node, 0.0) + rollup * w / (c + rank)
        return sorted(scores.items(), key=lambda kv: -kv[1])

    def close(self) -> None:
        for idx in (*self._lex.values(), *self._vec.values()):
            idx.close()
