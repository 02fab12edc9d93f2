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
from knowtree.retrieve.embedders.seqsum import sequential_sums
from knowtree.retrieve.embedders.wordtokens import WordTokens, splits_at_whitespace

if TYPE_CHECKING:
    import numpy as np

_DTYPES = {"F16": "<f2", "F32": "<f4", "I8": "i1"}
#: tokens in one call above which the table is converted to float32 once (~0.07 s)
LARGE_BATCH = 50_000
#: texts in one call up to which each is embedded by itself (a question; no word cache)
FEW = 8


def read_safetensor(path: Path, key: str) -> np.ndarray:
    """One tensor of a .safetensors file as a numpy array, mapped read-only, not read: a question
    touches the pages of its few tokens' rows only (reading the 15 MB table took 20 ms with the file
    in the page cache and 0.2 s without, of a cold CLI question's ~1 s)."""
    import numpy as np

    with path.open("rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
    if key not in header or header[key].get("dtype") not in _DTYPES:
        raise ConfigError(f"{path}: no supported tensor {key!r}")
    meta = header[key]
    start, end = meta["data_offsets"]
    dtype = np.dtype(_DTYPES[meta["dtype"]])
    shape = tuple(int(n) for n in meta["shape"])
    if end - start != dtype.itemsize * int(np.prod(shape)) or 8 + length + end > path.stat().st_size:
        raise ConfigError(f"{path}: tensor {key!r} does not match its header (a damaged file: reinstall knowtree)")
    mapped = np.memmap(path, dtype=dtype, mode="r", offset=8 + length + start, shape=shape)
    return mapped.view(np.ndarray)  # a plain array over the mapping (which it keeps open)


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
        # a text's rows are converted to float32 before their sum, so the vectors are the same
        self._table = read_safetensor(table_path, "embeddings")
        self._table32: np.ndarray | None = None  # a float32 copy, made for the first large batch
        self._tokenizer: Any = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        unk = self._tokenizer.token_to_id("[UNK]")
        self._unk = -1 if unk is None else int(unk)
        # a BERT tokenizer splits at whitespace before anything else: words (and a context joined
        # to its text by a newline) are tokenized on their own
        self._by_word = splits_at_whitespace(self._tokenizer)
        self._words = WordTokens(self._tokenizer, self._unk, by_word=self._by_word)
        self.max_tokens = files.max_tokens
        self.dim = int(self._table.shape[1])
        self.id = f"{files.name}-{files.embeddings_sha256[:12]}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_joined([""] * len(texts), texts)

    def _embed_few(self, texts: Sequence[str]) -> np.ndarray:
        """`embed` of a few texts (a question), each tokenized and averaged by itself: the batch
        path's bookkeeping costs more than it saves here (~50 vs ~170 microseconds a question)."""
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, enc in enumerate(self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)):
            ids = [i for i in enc.ids if i != self._unk][: self.max_tokens]
            if ids:
                out[row] = self._table[ids].astype(np.float32).mean(axis=0)
        return normalize(out)

    def embed_joined(
        self, contexts: Sequence[str], texts: Sequence[str], limit: int | None = None
    ) -> np.ndarray:
        """The vectors `embed` gives the strings `(context + "\\n" + text if context else text)[:limit]`,
        bit for bit, with each distinct context tokenized and added up once: a text's vector is the
        mean of its context's tokens and then its own (the first `max_tokens` of them, unknown
        tokens dropped), and the newline keeps the two apart for the tokenizer."""
        import numpy as np

        n = len(texts)
        if not n:
            return np.zeros((0, self.dim), dtype=np.float32)
        # a token is rarely shorter than 4 characters: cut very long texts before tokenizing them
        cut = self.max_tokens * 8 if limit is None else min(limit, self.max_tokens * 8)
        if n <= FEW:
            return self._embed_few(
                [(f"{c}\n{t}" if c else t)[:cut] for c, t in zip(contexts, texts, strict=True)]
            )
        keys: dict[str, int] = {}
        key = np.full(n, -1, dtype=np.int64)
        parts: list[str] = []
        for i, (context, text) in enumerate(zip(contexts, texts, strict=True)):
            if context and self._by_word and len(context) + 1 < cut:
                key[i] = keys.setdefault(context, len(keys))
                parts.append(text[: cut - len(context) - 1])
            else:
                parts.append((f"{context}\n{text}" if context else text)[:cut])
        ctx_ids, ctx_counts = self._words.encode(list(keys))
        ids, counts = self._words.encode(parts)
        table = self._rows(len(ctx_ids) + len(ids))
        ctx_n = np.minimum(ctx_counts, self.max_tokens)
        ctx_sums = sequential_sums(table, ctx_ids, np.cumsum(ctx_counts) - ctx_counts, ctx_n)
        joined = key >= 0
        before = np.where(joined, ctx_n[np.maximum(key, 0)] if keys else 0, 0)
        take = np.minimum(counts, self.max_tokens - before)
        sums = sequential_sums(
            table,
            ids,
            np.cumsum(counts) - counts,
            take,
            start=ctx_sums[np.maximum(key, 0)] if keys else None,
            started=joined & (before > 0),
        )
        total = before + take
        # the mean as numpy takes it: the float32 sum divided by the count in float64, then float32
        out = np.zeros((n, self.dim), dtype=np.float32)
        some = total > 0
        out[some] = sums[some] / total[some, None]
        return normalize(out)

    def _rows(self, tokens: int) -> np.ndarray:
        """The table to gather rows from: float16 as stored, or (for a batch of more tokens than a
        few thousand rows) a float32 copy, made once: converting each gathered row costs more."""
        import numpy as np

        if self._table32 is None and tokens > LARGE_BATCH:
            self._table32 = self._table.astype(np.float32)
        return self._table if self._table32 is None else self._table32
