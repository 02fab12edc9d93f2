"""Issue 36, a warm question on a large tree does no work it did for the last one: the entry counts of
the question's words (which FTS5 reads from each word's whole posting list) are kept while the
full-text index cannot have changed, and read again after any tree's save changed it."""

from __future__ import annotations

from pathlib import Path

import pytest

import knowtree.store.treeindex_sqlite as sql
from knowtree.core import KnowTree
from knowtree.testing.models import KeywordModel
from test_scale_index import _tickets

QUESTION = "what did carol file as code42 about ticket item3?"


@pytest.mark.sqlite_only  # the counts come from FTS5 (PostgreSQL reads them from its statistics tables)
def test_word_counts_are_read_once_until_an_index_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "kb.db"
    with KnowTree(db, model=KeywordModel(), summaries="none", structure="headings") as kt:
        kt.build(_tickets(tmp_path / "docs", 120), tree="t")
        counted: list[list[str]] = []
        real = sql.term_docs

        def counting(conn: object, tree: str, terms: list[str]) -> tuple[dict[str, int], int]:
            counted.append(list(terms))
            return real(conn, tree, terms)  # type: ignore[arg-type]

        monkeypatch.setattr(sql, "term_docs", counting)
        index = kt.tree_index("t")
        first = index.lexical_top(QUESTION, 25)
        assert counted and "carol" in counted[0]
        counted.clear()
        assert index.lexical_top(QUESTION, 25) == first  # the same words: no count read again
        index.lexical_top("what did carol file as code43?", 25)
        assert counted == [["code43"]]  # only the new word
        # another tree's save changes the whole table's counts ('ticket' and 'carol' in many more
        # entries): they are read again, and equal what FTS5 says now
        kt.build(_tickets(tmp_path / "more", 400, files=4), tree="u")
        counted.clear()
        assert kt.tree_index("t") is index  # its own tree did not change: the same object, its counts kept
        index.lexical_top(QUESTION, 25)
        assert counted and "carol" in counted[0]
        terms = ["carol", "file", "ticket", "code42"]
        kept = kt.store.read(lambda c: index._term_docs(c, terms))
        assert kept == kt.store.read(lambda c: real(c, "t", terms))
        assert kept[1] == index.entries + kt.tree_index("u").entries


def test_on_postgresql_a_question_reads_in_one_transaction_and_leaves_no_setting(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A question's candidate reads (words, the HNSW top-k, cosines, entries and their ancestors) are
    one read transaction, not one each (a BEGIN and a COMMIT per read were ~15 ms of a 10^5 question);
    the HNSW query's settings (enable_sort off among them) end with it, not with the transaction."""
    monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", "0")  # the HNSW path
    monkeypatch.setenv("KNOWTREE_EXACT_ENTRIES", "0")  # searched by candidates
    from knowtree.retrieve.embed import get_embedder
    from knowtree.store.postgres import PostgresStore

    with KnowTree(pg_url, model=KeywordModel(), summaries="none", structure="headings") as kt:
        kt.build(_tickets(tmp_path / "docs", 200), tree="t")
        tree = kt.tree("t")
        tree.retrieve(QUESTION, budget_tokens=80)  # the index read and kept
        reads: list[int] = []
        real = PostgresStore.read
        monkeypatch.setattr(PostgresStore, "read", lambda self, fn: reads.append(1) or real(self, fn))
        evidence = tree.retrieve(QUESTION, budget_tokens=80)
        assert any("code42" in e.text for e in evidence)
        assert len(reads) <= 2  # the freshness check, then everything the question reads
        index = kt.tree_index("t")

        def after_the_top_k(conn: object) -> tuple:
            index.dense_top(QUESTION, get_embedder(), 10)
            return conn.execute("SELECT current_setting('enable_sort')").fetchone()  # type: ignore[attr-defined]

        assert kt.store.read(lambda c: index.in_one_read(lambda: after_the_top_k(c))) == ("on",)
