"""Static (bag-of-token-vectors) embedders: a vector per token, averaged; thousands of texts a second.

- `StaticEmbedder`: the 64-dim int8 model baked into the `tokenlearn-static-model` wheel.
- `WordLlamaEmbedder`: WordLlama's `l2_supercat` 256-dim token vectors (MIT), shipped in the
  `wordllama` wheel and loaded from there only (its loader would otherwise try the network).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowtree.retrieve.embedders.base import MORE_HINT, WeightFile, normalize, require

if TYPE_CHECKING:
    import numpy as np

STATIC_VERSION = "tokenlearn-static-model==0.1.1"


class StaticEmbedder:
    """The static model shipped in the `tokenlearn-static-model` wheel."""

    id = "static-" + STATIC_VERSION

    def __init__(self) -> None:
        require("static_model", "the static embedding model (tokenlearn-static-model)")
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


WORDLLAMA_VERSION = "0.4.0.post1"
WORDLLAMA_WEIGHTS = WeightFile(
    "wordllama",
    WORDLLAMA_VERSION,
    "wordllama/weights/l2_supercat_256.safetensors",
    "64b47a2dc493cb8e85944076601189739852d7b64e0e1eedcb1937a251cd9fd5",
    MORE_HINT,
)
WORDLLAMA_TOKENIZER = WeightFile(
    "wordllama",
    WORDLLAMA_VERSION,
    "wordllama/tokenizers/l2_supercat_tokenizer_config.json",
    "93248f2a9ec36c7b35f700a033d5f36228aae48db61aee31007fa49062cdeb68",
    MORE_HINT,
)


class WordLlamaEmbedder:
    """WordLlama l2_supercat, 256 dimensions."""

    id = f"wordllama-l2_supercat-256-{WORDLLAMA_VERSION}"
    dim = 256

    def __init__(self) -> None:
        require("wordllama", "wordllama", MORE_HINT)
        weights = WORDLLAMA_WEIGHTS.verified()
        WORDLLAMA_TOKENIZER.verified()
        from wordllama import WordLlama

        # the package directory has the cache layout (weights/, tokenizers/): nothing is fetched
        self._model: Any = WordLlama.load(
            "l2_supercat", cache_dir=Path(weights).parent.parent, dim=256, disable_download=True
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows = self._model.embed([t if t.strip() else " " for t in texts], norm=True)
        return normalize(np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim))
