"""Hybrid search over a conversation memory: BM25 fused with embeddings, over passages and topics.

The units searched are the topics (name, summary, events, people) and the messages' passages
(`knowtree.answer.passages`: a long message is several passages, each scored on its own, so a fact
deep inside a pasted document is found). A message scores as its best passage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from knowtree.answer.passages import Passages
from knowtree.errors import ConfigError
from knowtree.retrieve.bm25 import LexicalIndex, Passage
from knowtree.retrieve.hybrid import EMBEDDING_WEIGHT, RRF_C, rrf_scores
from knowtree.types import Node

SearchFn = Callable[[str, int], list[tuple[str, float]]]  # (query, limit) → (unit id, score)


class HybridScorer:
    """Weighted reciprocal-rank fusion of BM25 and embedding similarity over every unit of a memory.

    BM25 runs on an in-memory FTS5 index (porter stemming) of the messages' passages and the topics'
    names, summaries and metadata, built on first use. The weights are BM25 1.0 and embeddings
    `EMBEDDING_WEIGHT`, fused with the constant `RRF_C`: the project-wide defaults tuned on the dev
    data with the default embedder (`knowtree.retrieve.hybrid`, benchmarks/RESULTS.md).
    """

    def __init__(
        self,
        nodes: dict[str, Node],
        search: SearchFn | None = None,
        embedder: Any = None,
        *,
        lexical_weight: float = 1.0,
        embedding_weight: float = EMBEDDING_WEIGHT,
        passages: Passages | None = None,
    ) -> None:
        self.nodes = nodes
        self.search = search
        self.embedder = embedder
        self.weights = (lexical_weight, embedding_weight)
        self.error: str | None = None
        self.passages = passages or Passages(nodes)
        # units: a branch by its node id, a message by its passages' ids
        self._units: list[tuple[str, str]] = []  # (unit id, node id)
        for n in nodes.values():
            if n.kind.value == "root":
                continue
            if n.is_leaf:
                self._units.extend((p.id, n.id) for p in self.passages.of(n.id))
            else:
                self._units.append((n.id, n.id))
        self._node_of = dict(self._units)
        self._matrix: Any = None
        self._index: LexicalIndex | None = None
        #: the last question's scores per passage id (what `passages.fill` ranks)
        self.passage_scores: dict[str, float] = {}

    def _text(self, unit: str) -> str:
        piece = self.passages.by_id.get(unit)
        if piece is not None:
            speaker = self.nodes[piece.leaf].text.partition(": ")[0]
            return f"{speaker}: {piece.text}"
        m = self.nodes[unit].meta
        return " ".join([m.title, m.summary, *m.noteworthy_events, *m.about])

    def _lexical(self, question: str) -> list[tuple[str, float]]:
        if self.search is not None:
            return self.search(question, 200)
        if self._index is None:
            self._index = LexicalIndex(":memory:", name="memory")
            self._index.add([Passage(u, self._text(u)) for u, _ in self._units])
        return self._index.search(question, 200)

    def unit_scores(self, question: str) -> dict[str, float]:
        """Fused score per unit (topic id or passage id), higher is better; only units that matched."""
        rankings: list[list[str]] = []
        weights: list[float] = []
        wl, we = self.weights
        if wl:
            rankings.append([uid for uid, _ in self._lexical(question)])
            weights.append(wl)
        if self.embedder is not None and we:
            try:
                import numpy as np

                if self._matrix is None:
                    self._matrix = self.embedder.embed([self._text(u) for u, _ in self._units])
                q = self.embedder.embed([question])[0]
                sims = self._matrix @ q
                rankings.append([self._units[int(j)][0] for j in np.argsort(-sims)[:200]])
                weights.append(we)
            except (ConfigError, ImportError, ValueError) as exc:  # no embedder: lexical only, noted
                self.error = f"embeddings unavailable, BM25 only: {exc}"
                self.embedder = None
        # ranks counted from 0 here (weight / (RRF_C + 0) for the first), as tuned for memories
        fused = rrf_scores(rankings, RRF_C, weights=weights, start=0)
        # a `search` function may return ids that are neither a unit nor a node: left out
        return {uid: s for uid, s in fused.items() if uid in self._node_of or uid in self.nodes}

    def scores(self, question: str) -> dict[str, float]:
        """Fused score per node (a message: its best passage); also sets `passage_scores`."""
        units = self.unit_scores(question)
        self.passage_scores = {u: s for u, s in units.items() if u in self.passages.by_id}
        for uid, score in units.items():  # a `search` function may score whole messages
            if uid in self.passages.by_leaf:
                for p in self.passages.of(uid):
                    self.passage_scores[p.id] = max(score, self.passage_scores.get(p.id, 0.0))
        out: dict[str, float] = {}
        for uid, score in units.items():
            nid = self._node_of.get(uid, uid)
            if score > out.get(nid, 0.0):
                out[nid] = score
        return out
