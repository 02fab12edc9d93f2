"""What a tree index embeds: a piece's text alone, inner entries with their context (issue 38)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from knowtree.retrieve.embed import HashEmbedder
from knowtree.retrieve.treeindex import EMBED_CHARS, vector_key
from knowtree.retrieve.treescore import normalize_dense, own_scores
from knowtree_eval.base import CorpusContext
from knowtree_eval.treemethod import TreeMethod
from test_eval_flatpieces import _filings


class Recording(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(64)
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts.extend(texts)
        return super().embed(texts)


def test_piece_vectors_are_of_their_text_alone_and_stored_under_their_own_key() -> None:
    built = TreeMethod(use_dense=False).built(CorpusContext(_filings()))
    emb = Recording()
    got = built.index.vectors(emb)
    assert got is not None
    rows = built.index.rows
    pieces = [r for r in rows if r.leaf]
    assert pieces and all(r.context for r in pieces)  # each piece has a context ("…, page N")…
    expected = [
        (r.text if r.leaf else f"{r.context}\n{r.text}" if r.context else r.text)[:EMBED_CHARS] for r in rows
    ]
    assert emb.texts == expected  # …that its vector leaves out; inner entries keep theirs
    keys = built.store.read(lambda c: c.execute("SELECT DISTINCT embedder FROM tree_index_vec").fetchall())
    assert (
        keys == [(vector_key(emb),)] and vector_key(emb) != emb.id
    )  # vectors of the old form are not reused
    ids, matrix = got
    assert np.allclose(matrix[ids.index(pieces[0].id)], emb.embed([pieces[0].text])[0])
    built.store.close()


def test_dense_minmax_keeps_every_entry_above_the_lowest() -> None:
    scores = {"a": 0.1, "b": 0.5, "c": 0.3, "d": 0.2}
    assert normalize_dense(scores) == pytest.approx({"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0})  # median 0.3
    assert normalize_dense(scores, "minmax") == pytest.approx({"a": 0.0, "b": 1.0, "c": 0.5, "d": 0.25})
    mixed = own_scores({"b": 2.0}, scores, list(scores), 0.5, "minmax")
    assert mixed == pytest.approx({"a": 0.0, "b": 1.0, "c": 0.25, "d": 0.125})
