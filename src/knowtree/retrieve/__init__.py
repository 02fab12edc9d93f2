"""Retrieval: the only BM25 (SQLite FTS5), dense embeddings and vector indexes, rank fusion, and
the tree used as an index (contextual entries, scores rolled up the tree, evidence packing).

May import: ingest, store, llm, config, text, types, errors (never answer, construct or the facades).
"""

from knowtree.retrieve.bm25 import (
    LexicalIndex,
    Passage,
    fingerprint,
    match_expression,
    query_terms,
)
from knowtree.retrieve.embed import Embedder, HashEmbedder, StaticEmbedder, get_embedder
from knowtree.retrieve.hybrid import HybridIndex, reciprocal_rank_fusion
from knowtree.retrieve.vectors import VectorIndex
from knowtree.text import QUERY_STOPWORDS

__all__ = [
    "QUERY_STOPWORDS",
    "Embedder",
    "HashEmbedder",
    "HybridIndex",
    "LexicalIndex",
    "Passage",
    "StaticEmbedder",
    "VectorIndex",
    "fingerprint",
    "get_embedder",
    "match_expression",
    "query_terms",
    "reciprocal_rank_fusion",
]
