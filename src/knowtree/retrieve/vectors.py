"""Dense top-k search: vectors stored in SQLite (float32 blobs), searched exactly with numpy.

Exact search is the right default here: a matrix product over 100k × 64 float32 takes milliseconds,
so an approximate index (usearch, faiss) would add a dependency without a measurable gain at the
sizes knowtree stores per tree or per evaluation corpus. Same shape as `LexicalIndex` (`ensure`,
`add`, `search`), so methods can swap one for the other:

    idx = VectorIndex("kb.db", name="corpus1")          # the default embedder (see retrieve/embed.py)
    idx.ensure(passages)                                 # embeds only if the corpus changed
    idx.search("Who approved the budget?", k=5)          # [(id, cosine), ...]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowtree.retrieve.bm25 import PassageLike, check_index_name, fingerprint, unpack
from knowtree.retrieve.embed import Embedder, get_embedder
from knowtree.store.flatindex import vector_table

if TYPE_CHECKING:
    import numpy as np


class VectorIndex:
    """Embedding search over passages; vectors persist in an SQLite file (or ":memory:"), or in a
    PostgreSQL knowtree database (a `postgresql://` URL or a PostgreSQL store: store/flatindex_pg.py)."""

    def __init__(
        self,
        path: str | Path | Any = ":memory:",
        *,
        name: str = "passages",
        embedder: Embedder | str | None = None,
        batch: int = 256,
    ) -> None:
        check_index_name(name)
        self.embedder = embedder if isinstance(embedder, Embedder) else get_embedder(embedder or None)
        self.name = name
        self.batch = batch
        self._matrix: np.ndarray | None = None
        self._ids: list[str] = []
        self._docs: list[str] = []
        self._rows = vector_table(path, name)
        self.path = str(self._rows.path)

    def close(self) -> None:
        self._rows.close()

    def __enter__(self) -> VectorIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._rows.count()

    # -- writing -------------------------------------------------------------------------------
    def add(self, passages: Iterable[PassageLike]) -> int:
        """Embed and store passages (an id already present is replaced). Returns the count."""
        unpacked = {pid: (doc, text) for pid, text, doc, _ in map(unpack, passages)}
        if not unpacked:
            return 0
        ids = list(unpacked)
        rows = []
        for start in range(0, len(ids), self.batch):
            part = ids[start : start + self.batch]
            vectors = self.embedder.embed([unpacked[p][1] for p in part])
            rows.extend(
                (pid, unpacked[pid][0], self.embedder.id, vec.tobytes())
                for pid, vec in zip(part, vectors, strict=True)
            )
        self._rows.put(rows)
        self._matrix = None
        return len(rows)

    def clear(self) -> None:
        self._rows.clear()
        self._matrix = None

    def ensure(self, passages: Sequence[PassageLike], fp: str | None = None) -> bool:
        """Make the index hold exactly `passages` embedded by this embedder; no-op when it already does."""
        fp = fp or fingerprint(passages)
        if self._rows.registered() == (fp, self.embedder.id):
            return False
        self.clear()
        count = self.add(passages)
        self._rows.register(fp, self.embedder.id, self.embedder.dim, count)
        return True

    # -- reading -------------------------------------------------------------------------------
    def _load(self) -> np.ndarray:
        import numpy as np

        if self._matrix is None:
            rows = self._rows.rows(self.embedder.id)
            self._ids = [r[0] for r in rows]
            self._docs = [r[1] for r in rows]
            dim = self.embedder.dim
            self._matrix = (
                np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32).reshape(len(rows), dim)
                if rows
                else np.zeros((0, dim), dtype=np.float32)
            )
        return self._matrix

    def vectors(self) -> tuple[list[str], np.ndarray]:
        """(ids, matrix): every stored vector of this embedder, rows in indexing order, read afresh
        (another connection may have added some since this object last searched)."""
        self._matrix = None
        matrix = self._load()
        return list(self._ids), matrix

    def search(
        self, query: str, k: int = 10, *, docs: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        """The `k` passages most similar to `query` as (id, cosine), best first; ties keep insertion order."""
        import numpy as np

        matrix = self._load()
        if k <= 0 or not len(matrix):
            return []
        scores = matrix @ self.embedder.embed([query])[0]
        if docs is not None:
            allowed = set(docs)
            mask = np.fromiter((d in allowed for d in self._docs), dtype=bool, count=len(self._docs))
            scores = np.where(mask, scores, -np.inf)
        order = np.argsort(-scores, kind="stable")[:k]
        return [(self._ids[i], float(scores[i])) for i in order if np.isfinite(scores[i])]
