"""Issue 36: PostgreSQL's dense top-k by pgvector's HNSW index (`store.treeindex_pg.ann_top`) for a
tree of `ann_entries()` entries or more: the tree's own index (branch pgbuild: built by the sync once
its vectors are written, `store.pgbulk.ensure_ann_index`), the plan uses it, the result is the exact
product's top, another tree's vectors in the same table are not in it, a tree without one is scored
exactly, and a question is answered by it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import knowtree.retrieve.treeindex as treeindex
from knowtree.core import KnowTree
from knowtree.retrieve.embed import get_embedder
from knowtree.store.pgbulk import ann_index_name
from knowtree.testing.models import KeywordModel
from test_scale_index import _tickets


@pytest.fixture
def two_trees(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", "100")  # "u" (900 leaves) gets its own index, "t" (60) none
    with KnowTree(pg_url, model=KeywordModel(), summaries="none", structure="headings") as kt:
        kt.build(_tickets(tmp_path / "small", 60, files=2), tree="t")
        kt.build(_tickets(tmp_path / "large", 900, files=6), tree="u")
    monkeypatch.delenv("KNOWTREE_ANN_ENTRIES")
    return pg_url


def _index_names(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = 'tree_index_vec'::regclass AND c.relname LIKE 'kt_ann_%%'"
            ).fetchall()
        ]


class _Explaining:
    """A store whose connections also EXPLAIN the dense top-k query they run."""

    def __init__(self, store: Any, plans: list[str]) -> None:
        self.store, self.plans = store, plans

    def read(self, fn: Any) -> Any:
        plans = self.plans

        class Conn:
            def __init__(self, conn: Any) -> None:
                self._conn = conn

            def execute(self, sql: str, *args: Any) -> Any:
                if "<#>" in sql and "ORDER BY" in sql:
                    rows = self._conn.execute("EXPLAIN " + sql, *args).fetchall()
                    plans.append("\n".join(r[0] for r in rows))
                return self._conn.execute(sql, *args)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._conn, name)

        return self.store.read(lambda conn: fn(Conn(conn)))

    def write(self, fn: Any) -> Any:
        return self.store.write(fn)


def _top(index: Any, question: str, k: int) -> dict[str, float]:
    near, _, _ = index.dense_top(question, get_embedder(), k)
    return near


def test_above_the_threshold_the_hnsw_index_gives_the_exact_top(
    two_trees: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    question = "what did carol file as code42 about item3?"
    with KnowTree(two_trees, model=KeywordModel()) as kt:
        index = kt.tree_index("u")
        monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", str(10**9))  # exact: the in-process product
        exact = _top(index, question, 10)
        _, exact_cosines, exact_mid = index.dense_top(question, get_embedder(), 10)
        plans: list[str] = []
        monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", "100")
        index.store = _Explaining(index.store, plans)
        near, cosines, mid = index.dense_top(question, get_embedder(), 10)
    own = ann_index_name("u", get_embedder().id, get_embedder().dim)
    assert plans and own in plans[0]  # the plan scans the tree's own HNSW index
    assert list(near) and set(near) == set(exact)
    assert all(abs(near[i] - exact[i]) < 1e-4 for i in near)
    some = list(exact_cosines(list(exact)))  # another entry's cosine is read by id
    assert cosines(some) == pytest.approx(exact_cosines(some), abs=1e-4)
    assert abs(mid - exact_mid) < 0.05  # the sample's median (900 entries: every one) vs the exact


def test_on_the_hnsw_path_other_entries_cosines_are_read_by_id_of_their_current_text_only(
    two_trees: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cosines` for entries outside the top-k: read by id (one array), equal to the exact product's,
    and none for an entry whose stored vector is of another text (its hash is not the entry's)."""
    import psycopg

    question = "what did carol file as code42 about item3?"
    with KnowTree(two_trees, model=KeywordModel()) as kt:
        index = kt.tree_index("u")
        monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", str(10**9))
        _, exact_cosines, _ = index.dense_top(question, get_embedder(), 10)
        monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", "100")
        near, cosines, _ = index.dense_top(question, get_embedder(), 10)
        others = [r.id for r in index.rows if r.id not in near][:300]
        index.with_ancestors(others)  # what `rank_candidates` reads before asking for cosines
        got = cosines(others)
        assert set(got) == set(others)
        assert got == pytest.approx(exact_cosines(others), abs=1e-4)
        stale = others[0]
        with psycopg.connect(two_trees) as conn:  # its vector now stands for an older text
            conn.execute("UPDATE tree_index_vec SET hash = 'older' WHERE tree = 'u' AND id = %s", (stale,))
        assert set(cosines(others)) == set(others) - {stale}


def test_a_vector_of_an_older_text_is_not_in_the_hnsw_top_and_the_next_takes_its_place(
    two_trees: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HNSW query has no join with the entries: the top-k keeps a vector only where its hash is its
    entry's current text's, and the k are still k (the next nearest fill in), equal to the exact top."""
    import psycopg

    question = "what did carol file as code42 about item3?"
    monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", str(10**9))
    with KnowTree(two_trees, model=KeywordModel()) as kt:
        exact = _top(kt.tree_index("u"), question, 11)  # the exact top, one more than asked for
    monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", "100")
    with KnowTree(two_trees, model=KeywordModel()) as kt:
        before = _top(kt.tree_index("u"), question, 10)
    best = max(before, key=before.__getitem__)
    with psycopg.connect(two_trees) as conn:  # the best one's vector now stands for an older text
        conn.execute("UPDATE tree_index_vec SET hash = 'older' WHERE tree = 'u' AND id = %s", (best,))
    with KnowTree(two_trees, model=KeywordModel()) as kt:
        near = _top(kt.tree_index("u"), question, 10)
    assert best in exact and best not in near and len(near) == 10
    assert set(near) == set(exact) - {best}


def test_only_a_large_tree_has_its_own_index_and_a_small_one_is_scored_exactly(
    two_trees: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = get_embedder()
    names = _index_names(two_trees)  # (a database the suite hands out again may hold other tests' too)
    assert ann_index_name("u", embedder.id, embedder.dim) in names
    assert ann_index_name("t", embedder.id, embedder.dim) not in names
    monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", "0")  # "t" is past the threshold now, but has no index yet
    plans: list[str] = []
    with KnowTree(two_trees, model=KeywordModel()) as kt:
        small = kt.tree_index("t")
        own = {r.id for r in small.rows}
        small.store = _Explaining(small.store, plans)
        near = _top(small, "what did bob file about item2?", 40)
    assert not plans  # no HNSW query: the exact product
    assert len(near) == 40 and set(near) <= own


def test_a_tree_gets_its_index_when_it_grows_past_the_threshold_and_loses_it_with_the_tree(
    two_trees: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = get_embedder()
    monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", "50")
    with KnowTree(two_trees, model=KeywordModel(), summaries="none", structure="headings") as kt:
        kt.build(_tickets(tmp_path / "small2", 60, files=2), tree="t", replace=True)  # saved again
        assert ann_index_name("t", embedder.id, embedder.dim) in _index_names(two_trees)
        plans: list[str] = []
        small = kt.tree_index("t")
        own = {r.id for r in small.rows}
        small.store = _Explaining(small.store, plans)
        near = _top(small, "what did bob file about item2?", 40)
        assert plans and ann_index_name("t", embedder.id, embedder.dim) in plans[0]
        assert len(near) == 40 and set(near) <= own  # the other tree's vectors are not in its graph
        kt.delete("u")
    names = _index_names(two_trees)
    assert ann_index_name("t", embedder.id, embedder.dim) in names
    assert ann_index_name("u", embedder.id, embedder.dim) not in names


def test_a_question_answered_by_the_hnsw_path(two_trees: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", "0")
    monkeypatch.setenv("KNOWTREE_EXACT_ENTRIES", "0")
    used: list[int] = []
    real = treeindex.TreeIndex._ann_top
    monkeypatch.setattr(treeindex.TreeIndex, "_ann_top", lambda self, *a: used.append(1) or real(self, *a))
    with KnowTree(two_trees, model=KeywordModel()) as kt:
        evidence = kt.tree("u").retrieve("what did carol file as code42?", budget_tokens=80)
    assert used and any("code42" in e.text for e in evidence)


def test_two_saves_building_their_indexes_at_once_do_not_deadlock(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two saves that have both written vectors and then both build their tree's index would each wait
    for the other's commit (PostgreSQL aborts one: "deadlock detected"); a save that will build one
    holds off other index builds before it writes a vector. Here each save waits, once its vectors
    are written, until the other's are too (or 3 s): without the hold both get there and deadlock."""
    import contextlib
    import threading

    import knowtree.retrieve.indexsync as indexsync

    monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", "10")
    meet = threading.Barrier(2, timeout=3)
    real = indexsync.write_entries

    def write_then_meet(*args: Any, **kwargs: Any) -> int:
        written = real(*args, **kwargs)
        with contextlib.suppress(threading.BrokenBarrierError):  # the other save held off: go on alone
            meet.wait()
        return written

    monkeypatch.setattr(indexsync, "write_entries", write_then_meet)
    errors: list[BaseException] = []

    def build(name: str) -> None:
        try:
            with KnowTree(pg_url, model=KeywordModel(), summaries="none", structure="headings") as kt:
                kt.build(_tickets(tmp_path / name, 30, files=2), tree=name)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    embedder = get_embedder()
    assert {ann_index_name(n, embedder.id, embedder.dim) for n in "ab"} <= set(_index_names(pg_url))


def test_the_first_questions_median_is_the_databases_and_the_samples_after(
    two_trees: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index object's first question on the HNSW path reads no vector for its median (the database
    computes it over the sample); the next reads the sample once and scores it: the same median."""
    import knowtree.store.treeindex_pg as treeindex_pg

    calls: list[str] = []
    for name in ("sample_median", "vector_sample"):
        real = getattr(treeindex_pg, name)
        monkeypatch.setattr(
            treeindex_pg, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a)
        )
    monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", "100")
    questions = ["what did carol file as code42 about item3?", "who filed code7?", "item5 tickets by bob"]
    with KnowTree(two_trees, model=KeywordModel()) as kt:
        index = kt.tree_index("u")
        first = [index.dense_top(q, get_embedder(), 10)[2] for q in questions]
        assert calls == ["sample_median", "vector_sample"]  # then the kept sample: no more reads
    with KnowTree(two_trees, model=KeywordModel()) as kt:
        index = kt.tree_index("u")
        index.dense_top(questions[2], get_embedder(), 10)  # a first question
        again = [index.dense_top(q, get_embedder(), 10)[2] for q in questions]  # by the sample
    assert calls[2:] == ["sample_median", "vector_sample"]
    assert again == pytest.approx(first, abs=1e-5)
    assert len(set(again)) == 3  # a median of each question's own cosines
