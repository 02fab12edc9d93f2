"""The issue similarity (`retrieve/similarity.py`) and its use in the KB issue ranking
(`KBIndexes.rank_issues`): centring, TF-IDF, best passage per issue, weight edges, the fit cache.
Small invented data, hash embedder."""

from __future__ import annotations

import numpy as np
import pytest

from knowtree.construct.kb import cluster
from knowtree.retrieve import LexicalIndex, Passage
from knowtree.retrieve.kbindex import FITS, KBIndexes
from knowtree.retrieve.similarity import FitCache, PassageSimilarity, Tfidf, center, tfidf

TEXTS = [
    "the remote does not pair with the tv",
    "the picture is too dark in the evening",
    "how do I pair the remote control",
    "sound is too quiet when watching films",
]


def test_center_removes_the_mean_and_normalizes() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(6, 5)).astype(np.float32) + 3.0  # a shared component
    out = center(vectors)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    raw = vectors - vectors.mean(axis=0)
    assert np.allclose(out, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-5)
    # a query is centred by the passages' mean, not its own
    mean = vectors.mean(axis=0)
    q = center(vectors[:1], mean)
    assert np.allclose(q, out[:1], atol=1e-5)
    assert cluster.center is center and cluster.tfidf is tfidf  # moved, same functions


def test_tfidf_rows_and_query_scores_agree() -> None:
    matrix = tfidf(TEXTS)
    assert matrix.shape[0] == len(TEXTS)
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    fitted = Tfidf(TEXTS)
    for i, text in enumerate(TEXTS):  # a fitted text against the rows = its row of the cosine matrix
        assert np.allclose(fitted.scores(text), matrix @ matrix[i], atol=1e-5)
    assert fitted.scores("pairing remotes")[[0, 2]].min() > 0  # words cut to 6 letters: pair, remote
    assert not fitted.scores("unknown words only").any()


def _sim() -> tuple[PassageSimilarity, np.ndarray]:
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(4, 8)).astype(np.float32)
    return PassageSimilarity(TEXTS, vectors, ["a", "b", "a", "c"]), vectors


def test_an_issue_takes_its_best_passage() -> None:
    sim, vectors = _sim()
    query_vector = vectors[2] + 0.01
    scores = sim.scores("pair the remote", query_vector)
    best = dict(sim.best("pair the remote", query_vector))
    assert set(best) == {"a", "b", "c"}
    assert best["a"] == pytest.approx(max(scores[0], scores[2]))
    assert best["b"] == pytest.approx(scores[1]) and best["c"] == pytest.approx(scores[3])
    assert [g for g, _ in sim.best("pair the remote", query_vector, k=1)] == ["a"]


def test_dense_weight_edges() -> None:
    sim, vectors = _sim()
    q = vectors[1]
    dense = center(vectors) @ center(q.reshape(1, -1), vectors.mean(axis=0))[0]
    assert np.allclose(sim.scores("unrelated words", q, dense_weight=1.0), dense, atol=1e-5)
    assert np.allclose(
        sim.scores("pair the remote", q, dense_weight=0.0), Tfidf(TEXTS).scores("pair the remote")
    )
    mixed = sim.scores("pair the remote", q, dense_weight=0.5)
    assert np.allclose(mixed, 0.5 * dense + 0.5 * Tfidf(TEXTS).scores("pair the remote"), atol=1e-5)
    with pytest.raises(ValueError):
        sim.scores("x", q, dense_weight=1.5)
    assert PassageSimilarity([], np.zeros((0, 8), np.float32), []).best("x", q) == []


def _issues_index() -> KBIndexes:
    idx = KBIndexes(":memory:", "t", "hash")
    idx.add(
        "issues",
        [
            Passage("r", "My remote does not pair with the TV"),
            Passage("r|1", "pairing the remote control fails"),
            Passage("p", "The picture is too dark"),
            Passage("p|1", "screen brightness is low in the evening"),
            Passage("s", "No sound from the speakers"),
        ],
    )
    return idx


def test_ranking_on_a_tiny_kb() -> None:
    idx = _issues_index()
    for weight in (0.0, 0.5, 1.0, "hybrid"):
        ranked = [n for n, _ in idx.rank_issues("the remote control will not pair", dense_weight=weight)]
        assert ranked[0] == "r", weight
        assert "r|1" not in ranked and set(ranked) <= {"r", "p", "s"}
    assert idx.rank_issues("screen too dark in the evening", dense_weight=0.5)[0][0] == "p"


def test_fit_is_cached_and_redone_when_the_index_changes() -> None:
    idx = _issues_index()
    first = idx.similarity()
    assert idx.similarity() is first and len(first) == 5
    idx.add("issues", [Passage("s|1", "the speakers make no sound at all")])
    second = idx.similarity()
    assert second is not first and len(second) == 6
    idx.add("issues", [Passage("s|1", "audio is missing from the speakers")])  # replaced, same count
    third = idx.similarity()
    assert third is not second and len(third) == 6
    assert idx.rank_issues("audio missing", dense_weight=0.0)[0][0] == "s"
    # another object on the same in-memory name is another index: its own fit
    assert KBIndexes(":memory:", "t", "hash").similarity() is not third
    assert len(FITS) <= FITS.size


def test_fit_cache_is_a_small_lru() -> None:
    cache = FitCache(2)
    calls: list[str] = []

    def fit(name: str) -> object:
        calls.append(name)
        return name

    for key in ("a", "b", "a", "c", "b"):
        cache.get(key, lambda key=key: fit(key))
    assert calls == ["a", "b", "c", "b"]  # "a" was used again, so "b" was evicted first
    assert len(cache) == 2


def test_lexical_passages_in_one_read() -> None:
    idx = LexicalIndex(":memory:")
    idx.add([Passage("a", "one", doc="d", meta={"k": 1}), Passage("b", "two")])
    before = idx.version()
    assert [(p.id, p.text, p.doc, p.meta) for p in idx.passages()] == [
        ("a", "one", "d", {"k": 1}),
        ("b", "two", "", {}),
    ]
    idx.add([Passage("a", "uno")])
    assert idx.version() != before and [p.text for p in idx.passages()] == ["two", "uno"]
