"""Retrieval building blocks (lexical BM25 now), usable by evaluation and by applications alike."""

from knowtree.retrieve.bm25 import (
    STOPWORDS,
    LexicalIndex,
    Passage,
    fingerprint,
    match_expression,
    query_terms,
)

__all__ = ["STOPWORDS", "LexicalIndex", "Passage", "fingerprint", "match_expression", "query_terms"]
