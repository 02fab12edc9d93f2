"""`ScoreParams.dense_norm`: the cosine anchored at the median (the default) or min-max (issue 38's fusion)."""

from __future__ import annotations

import pytest

from knowtree.retrieve.treescore import normalize_dense, own_scores


def test_dense_minmax_keeps_every_entry_above_the_lowest() -> None:
    scores = {"a": 0.1, "b": 0.5, "c": 0.3, "d": 0.2}
    assert normalize_dense(scores) == pytest.approx({"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0})  # median 0.3
    assert normalize_dense(scores, "minmax") == pytest.approx({"a": 0.0, "b": 1.0, "c": 0.5, "d": 0.25})
    mixed = own_scores({"b": 2.0}, scores, list(scores), 0.5, "minmax")
    assert mixed == pytest.approx({"a": 0.0, "b": 1.0, "c": 0.25, "d": 0.125})
