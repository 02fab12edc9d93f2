"""The flat passage indexes (retrieve/bm25.py, retrieve/vectors.py) in a PostgreSQL database
(store/flatindex_pg.py): the same rankings as SQLite's FTS5 BM25, the same stored order and
bookkeeping, so a knowledge base ranks alike on both backends."""

from __future__ import annotations

from typing import Any

import pytest

from knowtree.retrieve.bm25 import LexicalIndex, Passage
from knowtree.retrieve.vectors import VectorIndex
from knowtree.store import PostgresStore

PASSAGES = [
    Passage("p1", "Alice approved the budget for the lighthouse repairs", doc="a"),
    Passage("p2", "The launch was in Lisbon; the budget was approved later", doc="a"),
    Passage("p3", "Lighthouse keepers approve of approving approvals", doc="b"),
    Passage("p4", "Nothing about money here, only boats and harbours and boats", doc="b"),
    Passage("p5", "Budget budget budget: a report on budgets of café owners", doc="c"),
    Passage("p6", "Résumé of the harbour master's approval of the lighthouse", doc="c"),
    Passage("p7", "", doc="c"),
]
QUERIES = [
    "Who approved the budget?",
    "lighthouse",
    "boats in the harbour",
    "cafe resume",
    "budgets approval lighthouse keepers",
    "nothing matches zzz",
]


@pytest.fixture
def pg_store(pg_url: str) -> Any:
    store = PostgresStore(pg_url, pool_size=2)
    yield store
    store.close()


def _pair(pg_store: Any, name: str = "passages") -> tuple[LexicalIndex, LexicalIndex]:
    lite, pg = LexicalIndex(":memory:", name=name), LexicalIndex(pg_store, name=name)
    for index in (lite, pg):
        index.add(PASSAGES)
    return lite, pg


def _same(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> None:
    assert [pid for pid, _ in a] == [pid for pid, _ in b]
    assert [s for _, s in a] == pytest.approx([s for _, s in b], rel=1e-9, abs=1e-12)


def test_postgresql_ranks_passages_as_fts5_bm25(pg_store: Any) -> None:
    lite, pg = _pair(pg_store)
    for query in QUERIES:
        for k in (1, 3, 10):
            _same(lite.search(query, k), pg.search(query, k))
        _same(lite.search(query, 10, docs=["b", "c"]), pg.search(query, 10, docs=["b", "c"]))
    assert pg.search("Who approved the budget?", 10)  # a real ranking was compared, not two empties
    assert pg_store.query("SELECT COUNT(*) FROM lex_rows WHERE ix = 'passages'") == [(7,)]  # in the database


def test_replacing_and_clearing_keep_the_statistics_as_fts5_does(pg_store: Any) -> None:
    lite, pg = _pair(pg_store)
    before = pg.version()
    for index in (lite, pg):
        index.add([Passage("p4", "budget of the boats, approved", doc="b")])  # replaced, moved to the end
    assert pg.version() != before
    assert (
        [p.id for p in pg.passages()]
        == [p.id for p in lite.passages()]
        == ["p1", "p2", "p3", "p5", "p6", "p7", "p4"]
    )
    assert list(pg) == list(lite)
    assert len(pg) == len(lite) == 7
    assert pg.get("p4") == lite.get("p4")
    for query in QUERIES:
        _same(lite.search(query, 10), pg.search(query, 10))
    for index in (lite, pg):
        index.clear()
    assert len(pg) == 0 and pg.search("budget", 5) == []
    for index in (lite, pg):
        index.add(PASSAGES[:3])
    for query in QUERIES:
        _same(lite.search(query, 10), pg.search(query, 10))


def test_indexes_of_other_names_do_not_change_a_ranking(pg_store: Any) -> None:
    lite, pg = _pair(pg_store)
    other = LexicalIndex(pg_store, name="other")
    other.add([Passage(f"o{i}", "budget budget lighthouse") for i in range(20)])
    for query in QUERIES:
        _same(lite.search(query, 10), pg.search(query, 10))
    assert len(other) == 20 and len(pg) == 7


def test_ensure_skips_an_unchanged_corpus_and_a_url_opens_its_own_store(pg_store: Any, pg_url: str) -> None:
    pg = LexicalIndex(pg_store, name="corpus")
    assert pg.ensure(PASSAGES) is True
    with LexicalIndex(pg_url, name="corpus") as again:  # another process's view, by URL
        assert again.ensure(PASSAGES) is False
        assert len(again) == len(PASSAGES)


def test_vectors_round_trip_in_stored_order(pg_store: Any) -> None:
    lite, pg = VectorIndex(":memory:", embedder="hash"), VectorIndex(pg_store, embedder="hash")
    for index in (lite, pg):
        assert index.ensure(PASSAGES) is True
        assert index.ensure(PASSAGES) is False
        index.add([Passage("p2", "the budget, again", doc="a")])
    ids_l, m_l = lite.vectors()
    ids_p, m_p = pg.vectors()
    assert ids_p == ids_l and ids_p[-1] == "p2"
    assert (m_p == m_l).all()
    assert pg_store.query("SELECT COUNT(*) FROM vec_rows") == [(len(PASSAGES),)]
    assert pg.search("approved budget", 3) == lite.search("approved budget", 3)
    pg.clear()
    assert len(pg) == 0
