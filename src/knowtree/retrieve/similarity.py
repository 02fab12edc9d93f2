"""A calibrated text similarity over a fixed set of passages: mean-centred dense cosine + TF-IDF cosine.

Used where scores, not ranks, should be compared: clustering raw issues (`construct/kb/cluster.py`
takes `center` and `tfidf`) and ranking a knowledge base's issue nodes (`kbindex.KBIndexes`).

* Dense side: a static embedder's cosines crowd near one value (every text shares a common
  component); subtracting the mean vector of the passages (and the same mean from the query)
  spreads them, so the score says how close a query is to a passage relative to the others.
* Lexical side: TF-IDF (sublinear tf, smoothed idf, words cut to 6 letters as a cheap stemmer)
  fitted on the passages themselves, scored through an inverted index (the query's few words), so
  a fitted similarity holds O(total words) floats, not a passages × vocabulary matrix.

`PassageSimilarity.best` scores each passage by `dense_weight` × dense + (1 − dense_weight) ×
lexical and gives each group (e.g. the issue a passage belongs to) its best passage's score.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING

from knowtree.text import QUERY_STOPWORDS as STOPWORDS  # the BM25 query list

if TYPE_CHECKING:
    import numpy as np

_WORD = re.compile(r"[a-z0-9]+")
STEM = 6  # letters kept of each word


def words(text: str) -> list[str]:
    """The TF-IDF terms of a text: lowercased words of ≥ 2 characters, no stopwords, cut to STEM."""
    return [w[:STEM] for w in _WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 1]


def center(vectors: np.ndarray, mean: np.ndarray | None = None) -> np.ndarray:
    """Mean-centred, re-normalized rows (`mean`: the rows' own mean unless given). A static
    embedder's cosines crowd near one value; removing the mean spreads them so a threshold means the
    same on dense and TF-IDF similarities (measured: uncentred, the medical raw issues merged into 17
    clusters of 61 % purity at 0.6)."""
    import numpy as np

    mean = vectors.mean(axis=0, keepdims=True) if mean is None else mean.reshape(1, -1)
    out = vectors - mean
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1
    return (out / norms).astype(np.float32)


class Tfidf:
    """TF-IDF fitted on texts: weight (1 + ln tf) × ln((1 + n) / (1 + df)), rows L2-normalized."""

    def __init__(self, texts: Sequence[str]) -> None:
        import numpy as np

        docs = [Counter(words(t)) for t in texts]
        df: Counter[str] = Counter()
        for d in docs:
            df.update(d.keys())
        self.n = len(docs)
        self.vocab = {w: i for i, w in enumerate(sorted(df))}
        self.idf = {w: math.log((1 + self.n) / (1 + c)) for w, c in df.items()}
        self._raw = [{self.vocab[w]: (1 + math.log(c)) * self.idf[w] for w, c in d.items()} for d in docs]
        postings: dict[int, list[tuple[int, float]]] = {}
        for i, row in enumerate(self._raw):
            norm = math.sqrt(sum(v * v for v in row.values())) or 1.0
            for j, v in row.items():
                if v:
                    postings.setdefault(j, []).append((i, v / norm))
        self._postings = {
            j: (np.array([i for i, _ in p], dtype=np.int64), np.array([v for _, v in p], dtype=np.float32))
            for j, p in postings.items()
        }

    def vector(self, text: str) -> dict[int, float]:
        """The text's L2-normalized weights over the fitted vocabulary (unknown words dropped)."""
        counts = Counter(w for w in words(text) if w in self.vocab)
        row = {self.vocab[w]: (1 + math.log(c)) * self.idf[w] for w, c in counts.items()}
        norm = math.sqrt(sum(v * v for v in row.values())) or 1.0
        return {j: v / norm for j, v in row.items()}

    def scores(self, text: str) -> np.ndarray:
        """Cosine of the text with every fitted row, in fitting order."""
        import numpy as np

        out = np.zeros(self.n, dtype=np.float32)
        for j, q in self.vector(text).items():
            if j in self._postings:
                rows, weights = self._postings[j]
                out[rows] += q * weights
        return out

    def matrix(self) -> np.ndarray:
        """The fitted rows as a dense, L2-normalized (n, vocabulary) matrix."""
        import numpy as np

        out = np.zeros((self.n, max(1, len(self.vocab))), dtype=np.float32)
        for i, row in enumerate(self._raw):
            for j, v in row.items():
                out[i, j] = v
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1
        return out / norms


def tfidf(texts: Sequence[str]) -> np.ndarray:
    """L2-normalized TF-IDF rows (sublinear tf, smoothed idf) over the texts' own vocabulary."""
    return Tfidf(texts).matrix()


class PassageSimilarity:
    """Fitted on passages (texts, their dense vectors, and the group each belongs to).

    sim = PassageSimilarity(texts, vectors, groups)
    sim.best(query, embedder.embed([query])[0], dense_weight=0.5)   # [(group, score), ...] best first
    """

    def __init__(
        self,
        texts: Sequence[str],
        vectors: np.ndarray,
        groups: Sequence[str],
    ) -> None:
        import numpy as np

        if not len(texts) == len(vectors) == len(groups):
            raise ValueError("texts, vectors and groups must have the same length")
        self.mean = vectors.mean(axis=0) if len(vectors) else np.zeros(vectors.shape[1:], np.float32)
        self.dense = center(vectors, self.mean) if len(vectors) else vectors
        self.lexical = Tfidf(texts)
        names = list(dict.fromkeys(groups))
        index = {g: i for i, g in enumerate(names)}
        self.groups = names
        self._group_of = np.array([index[g] for g in groups], dtype=np.int64)

    def __len__(self) -> int:
        return len(self._group_of)

    def scores(self, query: str, query_vector: np.ndarray, dense_weight: float = 0.5) -> np.ndarray:
        """Each passage's score: dense_weight × centred cosine + (1 − dense_weight) × TF-IDF cosine."""
        import numpy as np

        if not 0.0 <= dense_weight <= 1.0:
            raise ValueError(f"dense weight {dense_weight}: use a weight in [0, 1]")
        out = np.zeros(len(self), dtype=np.float32)
        if not len(self):
            return out
        if dense_weight > 0:
            q = center(query_vector.reshape(1, -1).astype(np.float32), self.mean)[0]
            out += dense_weight * (self.dense @ q)
        if dense_weight < 1:
            out += (1 - dense_weight) * self.lexical.scores(query)
        return out

    def best(
        self, query: str, query_vector: np.ndarray, dense_weight: float = 0.5, k: int | None = None
    ) -> list[tuple[str, float]]:
        """Groups best first by their best passage's score (ties: order of first appearance)."""
        import numpy as np

        if not len(self):
            return []
        best = np.full(len(self.groups), -np.inf, dtype=np.float32)
        np.maximum.at(best, self._group_of, self.scores(query, query_vector, dense_weight))
        order = np.argsort(-best, kind="stable")
        if k is not None:
            order = order[:k]
        return [(self.groups[i], float(best[i])) for i in order]


class FitCache:
    """A small LRU of fitted objects by key (the key names what was fitted and its version)."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, object] = OrderedDict()
        self._lock = threading.Lock()  # the server asks from several threads; a fit runs unlocked

    def get(self, key: Hashable, fit: Callable[[], object]) -> object:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = fit()
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        self._items.clear()
