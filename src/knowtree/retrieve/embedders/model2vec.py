"""Model2Vec static models read from their files: a token-vector table and a tokenizer, nothing else.

A Model2Vec model (`model.safetensors` with one `embeddings` table, `tokenizer.json`) embeds a text as
the mean of its tokens' vectors (special tokens off, unknown tokens dropped, at most `max_tokens`
tokens), L2-normalised, as `model2vec.StaticModel.encode` does. Only `tokenizers` and numpy are needed
at run time; the safetensors header is read here (8-byte length, JSON, raw little-endian data).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowtree.errors import ConfigError
from knowtree.retrieve.embedders.base import WeightFileError, normalize, require, sha256_file

if TYPE_CHECKING:
    import numpy as np

_DTYPES = {"F16": "<f2", "F32": "<f4", "I8": "i1"}


def read_safetensor(path: Path, key: str) -> np.ndarray:
    """One tensor of a .safetensors file as a numpy array."""
    import numpy as np

    with path.open("rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
        if key not in header or header[key].get("dtype") not in _DTYPES:
            raise ConfigError(f"{path}: no supported tensor {key!r}")
        meta = header[key]
        start, end = meta["data_offsets"]
        fh.seek(8 + length + start)
        data = fh.read(end - start)
    return np.frombuffer(data, dtype=_DTYPES[meta["dtype"]]).reshape(meta["shape"])


@dataclass(frozen=True)
class Model2VecFiles:
    """A model directory and the pinned sha256 of its two files."""

    name: str
    directory: Path
    embeddings_sha256: str
    tokenizer_sha256: str
    max_tokens: int = 512

    def verified(self) -> tuple[Path, Path]:
        """The two files' paths once each matches its pin: hashed the first time, then only when the
        file changed since (`embedders.stamps`: a stamp of its identity in the user's cache)."""
        from knowtree.retrieve.embedders import stamps

        out = []
        for filename, expected in (
            ("model.safetensors", self.embeddings_sha256),
            ("tokenizer.json", self.tokenizer_sha256),
        ):
            path = self.directory / filename
            if not path.is_file():
                raise ConfigError(f"{path} is missing: reinstall knowtree")
            if not stamps.is_verified(path, expected):
                actual = sha256_file(path)
                if actual != expected:
                    raise WeightFileError(path, expected, actual)
                stamps.remember(path, expected)
            out.append(path)
        return out[0], out[1]


class Model2VecEmbedder:
    """Mean of token vectors from a Model2Vec table."""

    def __init__(self, files: Model2VecFiles) -> None:
        require("tokenizers", "tokenizers (for the static embedders)")
        from tokenizers import Tokenizer

        table_path, tokenizer_path = files.verified()
        # kept as stored (float16: 15 MB, no conversion at load, which a cold question waits for);
        # a text's rows are converted to float32 before their mean, so the vectors are the same
        self._table = read_safetensor(table_path, "embeddings")
        self._tokenizer: Any = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        unk = self._tokenizer.token_to_id("[UNK]")
        self._unk = -1 if unk is None else int(unk)
        self.max_tokens = files.max_tokens
        self.dim = int(self._table.shape[1])
        self.id = f"{files.name}-{files.embeddings_sha256[:12]}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        # a token is rarely shorter than 4 characters: cut very long texts before tokenizing them
        cut = [t[: self.max_tokens * 8] for t in texts]
        for row, enc in enumerate(self._tokenizer.encode_batch(cut, add_special_tokens=False)):
            ids = [i for i in enc.ids if i != self._unk][: self.max_tokens]
            if ids:
                out[row] = self._table[ids].astype(np.float32).mean(axis=0)
        return normalize(out)
