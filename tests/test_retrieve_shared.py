"""One BM25, one reciprocal-rank fusion, one place for stop words: the shared pieces in
retrieve/bm25.py, retrieve/hybrid.py and text.py, and the callers that used to have their own."""

from __future__ import annotations

from knowtree.answer import search
from knowtree.answer.hybrid import HybridScorer
from knowtree.retrieve import bm25
from knowtree.retrieve.bm25 import bm25_scores, query_terms
from knowtree.retrieve.hybrid import RRF_C, reciprocal_rank_fusion, rrf_scores
from knowtree.text import QUERY_STOPWORDS, STOPWORDS
from knowtree.types import Node, NodeKind, NodeMeta

# the list retrieve/bm25.py held before it moved to text.py: retrieval numbers are measured with it
BM25_LIST = frozenset(
    """
    a about above after again against all am an and any are aren as at be because been before being
    below between both but by can cannot could couldn did didn do does doesn doing don down during each
    few for from further had hadn has hasn have haven having he her here hers herself him himself his
    how i if in into is isn it its itself just let me more most my myself no nor not now of off on once
    only or other ought our ours ourselves out over own same shan she should shouldn so some such than
    that the their theirs them themselves then there these they this those through to too under until
    up very was wasn we were weren what when where which while who whom whose why will with won would
    wouldn you your yours yourself yourselves also ever s t d ll m re ve y
    """.split()
)


def test_query_stopwords_are_the_measured_bm25_list() -> None:
    assert QUERY_STOPWORDS == BM25_LIST
    assert {"may", "answer", "option"} <= STOPWORDS - QUERY_STOPWORDS  # words a question can be about
    assert query_terms("What may the answer be?") == ["may", "answer"]


def test_one_in_memory_bm25() -> None:
    assert search.bm25_scores is bm25_scores  # the answer step ranks a section's leaves with it
    assert not hasattr(bm25, "STOPWORDS")
    texts = ["the budget was approved", "budget budget overrun in Lisbon", "nothing here"]
    scores = bm25_scores("Who approved the budget?", texts)
    assert scores[2] == 0.0 and scores[0] > scores[1] > 0
    assert bm25_scores("the", texts) == [0.0, 0.0, 0.0]  # stop words only: nothing scores


def test_fusion_sums_weighted_reciprocal_ranks_and_keeps_first_appearance_on_ties() -> None:
    fused = reciprocal_rank_fusion([["a", "b"], ["b", "a"]], c=5)
    assert [pid for pid, _ in fused] == ["a", "b"] and fused[0][1] == fused[1][1] == 1 / 6 + 1 / 7
    assert rrf_scores([["a"], ["a", "b"]], 5, weights=[0.0, 2.0]) == {"a": 2 / 6, "b": 2 / 7}
    assert rrf_scores([["a", "b"]], 5, start=0) == {"a": 1 / 5, "b": 1 / 6}


def test_memory_scorer_fuses_from_rank_zero_and_drops_unknown_ids() -> None:
    root = Node(id="r", kind=NodeKind.ROOT, level=2, meta=NodeMeta(title="root"), children=["t"])
    topic = Node(id="t", kind=NodeKind.BRANCH, level=1, meta=NodeMeta(title="topic"), children=["m"])
    leaf = Node(id="m", kind=NodeKind.LEAF, level=0, meta=NodeMeta(), text="alice: the budget is approved")
    found = [("stranger", 9.0), ("t", 5.0), ("m", 4.0)]
    scorer = HybridScorer({n.id: n for n in (root, topic, leaf)}, search=lambda _q, _k: found)
    assert scorer.unit_scores("budget") == {"t": 1 / (RRF_C + 1), "m": 1 / (RRF_C + 2)}
