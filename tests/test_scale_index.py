"""Issue 36, retrieval whose cost does not grow with the corpus: a large index is searched by
candidates (the inverted index's top-k, the vectors' top-k, their ancestors read by id), vectors are
written with the entries, and inner entries carry their leaf counts."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import knowtree.retrieve.treesearch as treesearch
import knowtree.store.treeindex_sqlite as sql
from conftest import write_corpus
from knowtree.core import KnowTree
from knowtree.retrieve.embed import HashEmbedder, get_embedder
from knowtree.retrieve.treeindex import TreeIndex, leaf_counts
from knowtree.retrieve.treesearch import rank_candidates, rank_tree, search_index, shape_of
from knowtree.testing.models import KeywordModel

QUESTION = "Who approved the marketing budget?"


def _tickets(directory: Path, n: int, files: int = 3) -> list[str]:
    """`files` Markdown files of `n` short sections in all; every section names 'ticket'."""
    directory.mkdir(parents=True, exist_ok=True)
    people = ["alice", "bob", "carol", "dmitri"]
    paths = []
    per = -(-n // files)
    for f in range(files):
        lines = [f"# Batch {f}", ""]
        for j in range(per):
            i = f * per + j
            lines += [
                f"## Ticket {i}",
                "",
                f"{people[i % 4].title()} filed ticket code{i} about item{i % 7}.",
                "",
            ]
        path = directory / f"b{f}.md"
        path.write_text("\n".join(lines), encoding="utf-8")
        paths.append(str(path))
    return paths


@pytest.fixture
def tickets(tmp_path: Path) -> Path:
    db = tmp_path / "kb.db"
    with KnowTree(db, model=KeywordModel(), summaries="none", structure="headings") as kt:
        kt.build(_tickets(tmp_path / "docs", 120), tree="t")
    return db


@pytest.mark.sqlite_only  # opens the SQLite file itself
def test_vectors_are_written_by_the_build_and_no_entry_is_embedded_at_question_time(
    tickets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = get_embedder()
    conn = sqlite3.connect(tickets)
    entries = conn.execute("SELECT COUNT(*) FROM tree_index WHERE tree = 't'").fetchone()[0]
    current = conn.execute(
        "SELECT COUNT(*) FROM tree_index_vec v JOIN tree_index i ON i.tree = v.tree AND i.id = v.id"
        " AND i.body_hash = v.hash WHERE v.tree = 't' AND v.embedder = ?",
        (default.id,),
    ).fetchone()[0]
    conn.close()
    assert entries > 120 and current == entries  # every entry, right after the build
    embedded: list[int] = []
    real = type(default).embed
    monkeypatch.setattr(
        type(default), "embed", lambda self, texts: embedded.append(len(texts)) or real(self, texts)
    )
    for exact in ("0", "1000000"):  # the candidate path and the exact one alike
        monkeypatch.setenv("KNOWTREE_EXACT_ENTRIES", exact)
        with KnowTree(tickets, model=KeywordModel()) as kt:
            assert kt.tree("t").retrieve("what did carol file about item3?", budget_tokens=200)
    assert embedded and set(embedded) == {1}  # the question only, never an entry


@pytest.mark.sqlite_only  # opens the SQLite file itself
def test_a_memory_add_writes_its_index_and_vectors(tmp_path: Path) -> None:
    default = get_embedder()
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        kt.memory("chat").add(
            [{"role": "user", "content": f"message {i} about the budget of project {i % 3}"} for i in range(12)]
        )
    conn = sqlite3.connect(tmp_path / "kb.db")
    entries = conn.execute("SELECT COUNT(*) FROM tree_index WHERE tree = 'chat'").fetchone()[0]
    vectors = conn.execute(
        "SELECT COUNT(*) FROM tree_index_vec WHERE tree = 'chat' AND embedder = ?", (default.id,)
    ).fetchone()[0]
    conn.close()
    assert entries >= 12 and vectors == entries


def test_a_question_reads_only_its_candidates_and_their_ancestors(
    tickets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: dict[str, int] = {"all": 0, "by_id": 0}
    from knowtree.store import treeindex_pg  # the PostgreSQL module names the same functions

    for name, key in (("entry_rows", "all"), ("rows_by_id", "by_id")):
        real = getattr(sql, name)

        def spy(*args: Any, _real: Any = real, _key: str = key) -> Any:
            got = _real(*args)
            read[_key] += len(got)
            return got

        monkeypatch.setattr(sql, name, spy)
        monkeypatch.setattr(treeindex_pg, name, spy)
    monkeypatch.setattr(treesearch, "CANDIDATES_MIN", 10)
    monkeypatch.setattr(treesearch, "CANDIDATES_PER_TOKEN", 0.0)
    monkeypatch.setenv("KNOWTREE_EXACT_ENTRIES", "0")
    with KnowTree(tickets, model=KeywordModel()) as kt:
        entries = kt.tree_index("t").entries
        evidence = kt.tree("t").retrieve("what did carol file as code42?", budget_tokens=60)
    assert any("code42" in e.text for e in evidence)
    assert read["all"] == 0  # the index was never read whole
    # 10 lexical + 10 dense candidates and their ancestors (sections, files, root) of ~130 entries
    assert 0 < read["by_id"] <= 10 + 10 + 3 + 3 * 3 + 1 < entries


def test_the_candidate_path_equals_the_exact_path_when_k_covers_every_entry(
    tickets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emb = HashEmbedder(64)
    with KnowTree(tickets, model=KeywordModel()) as kt:
        index = kt.tree_index("t")
        for kind in ("document", "conversation"):
            params = treesearch.default_params(kind)
            # no term held by half the entries ('file', 'ticket': `lexical_top` leaves those out)
            for q in ("what did carol say of code42?", "bob code7 code9", "nothing matches zzz"):
                exact = rank_tree(index, q, embedder=emb, params=params)
                cand, rows = rank_candidates(index, q, k=10_000, embedder=emb, params=params)
                assert len(rows) == index.entries
                assert sorted(cand.pieces) == sorted(exact.pieces)
                # the same order, but where two scores tie to float32's rounding
                in_order = [exact.scores[p] for p in cand.pieces]
                assert in_order == pytest.approx([exact.scores[p] for p in exact.pieces], abs=1e-6)
                # float32 dot products of a vector in another row of the matrix may round apart
                # (~1e-7), and PostgreSQL sums BM25 in its own order
                assert cand.scores == pytest.approx(exact.scores, abs=1e-6)
                assert cand.prior == pytest.approx(exact.prior, abs=1e-6)
        monkeypatch.setattr(treesearch, "CANDIDATES_MIN", 10_000)
        packed = []
        for exact_entries in ("1000000", "0"):
            monkeypatch.setenv("KNOWTREE_EXACT_ENTRIES", exact_entries)
            found = search_index(index, "what did carol say of code42?", 300, embedder=emb)
            assert (found.rows is None) == (exact_entries != "0")  # the path asked for was taken
            packed.append([(e.text, e.score, e.citation, e.path) for e in found.evidence])
        assert packed[0] and packed[1] == packed[0]


@pytest.mark.sqlite_only  # opens the SQLite file itself
def test_a_new_process_maps_the_vectors_file_instead_of_reading_every_vector_row(
    tickets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KNOWTREE_EXACT_ENTRIES", "0")
    question = "what did carol file as code42?"
    with KnowTree(tickets, model=KeywordModel()) as kt:  # the first search writes the file
        first = [(e.text, e.score) for e in kt.tree("t").retrieve(question, budget_tokens=100)]
    files = sorted(p.suffix for p in Path(f"{tickets}.vectors").iterdir())
    assert files == [".f32", ".ids"]
    read: list[int] = []
    real = sql.current_vectors
    monkeypatch.setattr(sql, "current_vectors", lambda *a: read.append(1) or real(*a))
    with KnowTree(tickets, model=KeywordModel()) as kt:
        assert [(e.text, e.score) for e in kt.tree("t").retrieve(question, budget_tokens=100)] == first
        assert not read  # mapped from the file
        Path(_tickets(tickets.parent / "more", 10, files=1)[0]).rename(tickets.parent / "docs" / "b9.md")
        kt.build(sorted(str(p) for p in (tickets.parent / "docs").iterdir()), tree="t")
        kt.tree("t").retrieve(question, budget_tokens=100)
        assert read  # the entries changed: the file's name no longer matches, the rows are read
    assert sorted(p.suffix for p in Path(f"{tickets}.vectors").iterdir()) == [".f32", ".ids"]  # the old went


@pytest.mark.sqlite_only  # the vectors files beside an SQLite file
def test_the_build_writes_the_vectors_file_so_the_first_question_reads_no_vector_row(
    tickets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = Path(f"{tickets}.vectors")
    assert sorted(p.suffix for p in folder.iterdir()) == [".f32", ".ids"]  # before any question
    written = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    read: list[int] = []
    real = sql.current_vectors
    monkeypatch.setattr(sql, "current_vectors", lambda *a: read.append(1) or real(*a))
    monkeypatch.setenv("KNOWTREE_EXACT_ENTRIES", "0")
    with KnowTree(tickets, model=KeywordModel()) as kt:  # a new process's first question
        assert kt.tree("t").retrieve("what did carol file as code42?", budget_tokens=100)
    assert not read and {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == written


@pytest.mark.sqlite_only  # the vectors files beside an SQLite file
def test_deleting_a_tree_removes_its_vectors_files_and_only_its_own(tickets: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KNOWTREE_EXACT_ENTRIES", "0")
    with KnowTree(tickets, model=KeywordModel(), summaries="none", structure="headings") as kt:
        kt.build(_tickets(tickets.parent / "other", 30, files=1), tree="u")
        for tree in ("t", "u"):  # a search writes each tree's file
            kt.tree(tree).retrieve("what did carol file as code42?", budget_tokens=100)
        folder = Path(f"{tickets}.vectors")
        assert len(list(folder.iterdir())) == 4
        kt.delete("t")
        left = sorted(folder.iterdir())
        assert len(left) == 2  # u's two files stay
        assert kt.tree("u").retrieve("what did carol file as code4?", budget_tokens=100)


def test_inner_entries_store_the_leaf_counts_the_rollup_divides_by(tmp_path: Path) -> None:
    paths = write_corpus(tmp_path / "docs")
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        kt.build(paths, tree="t")
        index = TreeIndex(kt.store, "t")
        shape = shape_of(index)
        below = {a: sum(a in shape.ancestors(leaf) for leaf in shape.leaves) for a in shape.parent}
        stored = {r.id: r.leaves for r in index.rows if not r.leaf}
        assert stored and stored == {a: n for a, n in below.items() if a in stored}
        assert max(stored.values()) == len(shape.leaves)  # the root's
        Path(paths[0]).write_text(Path(paths[0]).read_text() + "\n\nOne more paragraph on budgets.\n")
        kt.build(paths, tree="t")  # an incremental save keeps them right
        index = TreeIndex(kt.store, "t")
        links = [(0, r.id, r.parent, int(r.leaf), 0) for r in index.rows]
        assert {r.id: r.leaves for r in index.rows if not r.leaf} == {
            r.id: leaf_counts(links).get(r.id, 0) for r in index.rows if not r.leaf
        }


def test_lexical_top_ranks_as_fts5_and_drops_only_terms_held_by_half_the_entries(tickets: Path) -> None:
    with KnowTree(tickets, model=KeywordModel()) as kt:
        index = kt.tree_index("t")
        q = "what did carol file as code42 about ticket item3?"  # 'ticket': in every leaf
        docs, total = kt.store.read(lambda c: index.sql.term_docs(c, "t", ["carol", "file", "ticket", "code42"]))
        assert total == index.entries and 2 * docs["ticket"] >= total and 1 <= docs["code42"] <= 4
        full = index.lexical(q)
        top = index.lexical_top(q, 25)
        # the same scores place by place, to FTS5's floor idf (entries tied but for it may swap; a
        # tolerance, not rounding: a score 1e-6 apart can round to two values)
        assert list(top.values()) == pytest.approx(list(full.values())[:25], abs=1e-4)
        assert list(top)[:4] == list(full)[:4] and all(abs(top[i] - full[i]) < 1e-4 for i in top)
        only_common = index.lexical_top("ticket", 5)  # nothing else to search by: the term is kept
        assert list(only_common) == list(index.lexical("ticket"))[:5]


# -- PostgreSQL: the same index, BM25 from postings ----------------------------------------------------


@pytest.mark.sqlite_only  # compares with an SQLite file of its own
def test_postgres_bm25_ranks_as_sqlite_fts5(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PostgreSQL index's BM25 (postings, FTS5's formula in SQL) gives FTS5's order and scores,
    and a question's evidence is the same on both backends (the candidate path and the exact one)."""
    from knowtree.store.treeindex_pg import fts_tokens

    assert fts_tokens("Filed the Café's résumés, running_fast x2, technology 3M™") == [
        "file", "the", "cafe", "s", "resum", "run", "fast", "x2", "technolog", "3m",
    ]  # fmt: skip
    paths = write_corpus(tmp_path / "docs") + _tickets(tmp_path / "tickets", 60, files=2)
    questions = [
        "Who approved the marketing budget?",
        "what did carol file as code42 about ticket item3?",
        "bob code7 launch Lisbon",
        "nothing matches zzz",
    ]
    got: dict[str, Any] = {}
    for backend, db in (("sqlite", tmp_path / "kb.db"), ("postgresql", pg_url)):
        with KnowTree(db, model=KeywordModel(), summaries="none", structure="headings") as kt:
            kt.build(paths, tree="t")  # one tree: FTS5's statistics (the file's) are the tree's
            index = kt.tree_index("t")
            out = [index.lexical(q) for q in questions]
            for exact in ("1000000", "0"):
                monkeypatch.setenv("KNOWTREE_EXACT_ENTRIES", exact)
                for q in questions:
                    out.append([(e.text, e.citation) for e in kt.tree("t").retrieve(q, budget_tokens=200)])
            got[backend] = out
    for want, have in zip(got["sqlite"], got["postgresql"], strict=True):
        if isinstance(want, dict):
            assert have.keys() == want.keys()  # the same entries, with the same scores, best first
            assert all(abs(have[i] - want[i]) < 1e-9 * max(1.0, abs(want[i])) for i in want)
            assert list(have.values()) == sorted(have.values(), reverse=True)  # ties in either order
        else:
            assert have == want


class _Recording:
    """A store whose connections record the SQL they run (the freshness check's cost)."""

    def __init__(self, store: Any, seen: list[str]) -> None:
        self.store, self.seen = store, seen

    def _wrap(self, fn: Any) -> Any:
        seen = self.seen

        class Conn:
            def __init__(self, conn: Any) -> None:
                self._conn = conn

            def execute(self, sql_text: str, *args: Any) -> Any:
                seen.append(" ".join(sql_text.split()))
                return self._conn.execute(sql_text, *args)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._conn, name)

        return lambda conn: fn(Conn(conn))

    def read(self, fn: Any) -> Any:
        return self.store.read(self._wrap(fn))

    def write(self, fn: Any) -> Any:
        return self.store.write(self._wrap(fn))


def test_the_per_question_freshness_check_reads_no_node_rows(tickets: Path) -> None:
    seen: list[str] = []
    with KnowTree(tickets, model=KeywordModel()) as kt:
        index = kt.tree_index("t")
        index.store = _Recording(index.store, seen)
        assert not index.ensure() and index.current()
    assert seen and not [s for s in seen if "FROM nodes" in s or "doc_info" in s]
    assert len(seen) <= 4  # the state row and the tree's head row, twice


def test_a_tree_saved_again_within_the_same_second_is_synced_again(
    tickets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that runs no index hook (another process, a store opened alone), same second, same
    node count: the next question still sees the change."""
    import knowtree.store.sqlbase as sqlbase
    from knowtree.store import open_store

    monkeypatch.setattr(sqlbase, "_now", lambda: "2026-01-01T00:00:00+00:00")  # one second throughout
    with KnowTree(tickets, model=KeywordModel()) as kt:
        index = kt.tree_index("t")
        index.ensure()
        plain = open_store(tickets)  # no index hook attached
        try:
            nodes = plain.load_nodes("t")
            leaf = next(n for n in nodes.values() if n.is_leaf and "code42" in n.text)
            nodes[leaf.id] = leaf.model_copy(update={"text": leaf.text.replace("code42", "zebra42")})
            for _ in range(2):  # twice: the second save's `updated` must move on too
                plain.save_tree(
                    "t",
                    root_id=plain.root_id("t"),
                    nodes=list(nodes.values()),
                    documents=plain.documents("t"),
                    model="keyword",
                    settings={},
                )
                assert index.ensure()  # behind: re-synced
        finally:
            plain.close()
        evidence = kt.tree("t").retrieve("what did carol file as zebra42?", budget_tokens=60)
    assert any("zebra42" in e.text for e in evidence)
