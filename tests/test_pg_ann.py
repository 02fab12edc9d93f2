"""Issue 36: PostgreSQL's dense top-k by pgvector's HNSW index (`store.treeindex_pg.ann_top`) for a
tree of `ann_entries()` entries or more: the plan uses the index, the result is the exact product's
top, another tree's vectors in the same table do not starve it, and a question is answered by it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import knowtree.retrieve.treeindex as treeindex
from knowtree.core import KnowTree
from knowtree.retrieve.embed import get_embedder
from knowtree.testing.models import KeywordModel
from test_scale_index import _tickets


@pytest.fixture
def two_trees(pg_url: str, tmp_path: Path) -> str:
    with KnowTree(pg_url, model=KeywordModel(), summaries="none", structure="headings") as kt:
        kt.build(_tickets(tmp_path / "small", 60, files=2), tree="t")
        kt.build(_tickets(tmp_path / "large", 900, files=6), tree="u")
    return pg_url


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
    assert plans and "tree_index_vec_hnsw_256" in plans[0]  # the plan scans the HNSW index
    assert list(near) and set(near) == set(exact)
    assert all(abs(near[i] - exact[i]) < 1e-4 for i in near)
    some = list(exact_cosines(list(exact)))  # another entry's cosine is read by id
    assert cosines(some) == pytest.approx(exact_cosines(some), abs=1e-4)
    assert abs(mid - exact_mid) < 0.05  # the sample's median (900 entries: every one) vs the exact


def test_a_small_tree_among_large_ones_still_gets_k_of_its_own(
    two_trees: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", "0")
    plans: list[str] = []
    with KnowTree(two_trees, model=KeywordModel()) as kt:
        small = kt.tree_index("t")
        own = {r.id for r in small.rows}
        small.store = _Explaining(small.store, plans)
        near = _top(small, "what did bob file about item2?", 40)
    assert plans and "tree_index_vec_hnsw_256" in plans[0]
    assert len(near) == 40 and set(near) <= own  # iterative scan: the other tree's vectors skipped


def test_a_question_answered_by_the_hnsw_path(two_trees: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", "0")
    monkeypatch.setenv("KNOWTREE_EXACT_ENTRIES", "0")
    used: list[int] = []
    real = treeindex.TreeIndex._ann_top
    monkeypatch.setattr(treeindex.TreeIndex, "_ann_top", lambda self, *a: used.append(1) or real(self, *a))
    with KnowTree(two_trees, model=KeywordModel()) as kt:
        evidence = kt.tree("u").retrieve("what did carol file as code42?", budget_tokens=80)
    assert used and any("code42" in e.text for e in evidence)
