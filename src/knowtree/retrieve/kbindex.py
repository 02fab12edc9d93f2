"""The two hybrid (BM25 + dense, fused by reciprocal rank) indexes of a knowledge base: its issue
nodes and its contextualized document chunks. Both live in the KB's database file, in tables named
after a hash of the KB name (index names allow only letters, digits and '_')."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from knowtree.retrieve.bm25 import LexicalIndex, Passage
from knowtree.retrieve.embed import Embedder, get_embedder
from knowtree.retrieve.hybrid import HybridIndex
from knowtree.retrieve.vectors import VectorIndex


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

    def add(self, part: str, passages: Sequence[Passage]) -> None:
        """Index (or re-index, same id) passages in `issues` or `chunks`."""
        self._lex[part].add(passages)
        self._vec[part].add(passages)

    def reset(self, part: str) -> None:
        self._lex[part].clear()
        self._vec[part].clear()

    def count(self, part: str) -> int:
        return len(self._lex[part])

    def lexical(self, part: str) -> LexicalIndex:
        return self._lex[part]

    def dense(self, part: str) -> VectorIndex:
        return self._vec[part]

    def close(self) -> None:
        for idx in (*self._lex.values(), *self._vec.values()):
            idx.close()
