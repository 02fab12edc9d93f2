"""`knowtree db copy`: every table copied, verified by counts and content hashes, resumable after an
interruption, refusing to overwrite different data; the CLI's table and exit codes."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import invoke, write_corpus

from knowtree.core import KnowTree
from knowtree.retrieve.bm25 import LexicalIndex, Passage
from knowtree.retrieve.vectors import VectorIndex
from knowtree.server.tenancy import KeyStore
from knowtree.store import SQLiteStore, open_store
from knowtree.store import copy as copying
from knowtree.store.copy import CopyConflictError, copy_store, table_hash
from knowtree.store.docinfo import add_expert, list_experts
from knowtree.store.tables import encode_row, list_tables, normal, normal_row
from knowtree.testing.models import KeywordModel

# copies between the backends named in each test (SQLite files by path, PostgreSQL through `pg_url`):
# not redirected by KNOWTREE_TEST_BACKEND=postgresql
pytestmark = pytest.mark.sqlite_only


def _populate(db: Path, corpus: Path, *, tree: str = "s") -> None:
    """A tree (with its index built by a search), a memory with messages, an expert note, a key."""
    write_corpus(corpus)
    with KnowTree(db, model=KeywordModel()) as kt:
        kt.build([str(corpus)], tree=tree)
        kt.tree(tree).retrieve("which database", budget_tokens=400, embedder="hash")
        mem = kt.memory("chat")
        mem.embedder = "hash"
        mem.add([{"role": "user", "content": f"message {i} about lighthouses"} for i in range(12)])
        add_expert(kt.store, tree, "look in the architecture notes first")
        KeyStore(kt.store).create("acme", label="ci")
    passages = [Passage(f"p{i}", f"passage {i} about {w}", doc=f"d{i % 3}") for i, w in enumerate(FLAT_WORDS)]
    with LexicalIndex(db, name="corpus") as lex, VectorIndex(db, name="corpus", embedder="hash") as vec:
        lex.ensure(passages)
        vec.ensure(passages)


FLAT_WORDS = ["harbors", "lanterns", "ledgers", "orchards", "kernels", "falcons", "harbors and ledgers"]


def _tables(store: Any) -> dict[str, tuple[int, str]]:
    return {t.name: table_hash(store, t) for t in list_tables(store)}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    db = tmp_path / "src.db"
    _populate(db, tmp_path / "docs")
    return db


def test_sqlite_to_sqlite_copies_every_table_and_verifies(source: Path, tmp_path: Path) -> None:
    src, dst = SQLiteStore(source), SQLiteStore(tmp_path / "dst.db")
    report = copy_store(src, dst, batch=7)
    assert report.ok and report.complete
    by_name = {t.name: t for t in report.tables}
    for name in (
        "trees",
        "nodes",
        "documents",
        "messages",
        "experts",
        "tenants",
        "api_keys",
        "runs",
        "tree_index",
    ):
        assert by_name[name].source_rows > 0, name
        assert by_name[name].written == by_name[name].source_rows == by_name[name].dest_rows
    assert _tables(dst) == _tables(src)  # whole tables equal, not only the rows under source keys
    # what the destination derives itself: full-text search answers alike, documents in stored order
    assert dst.search_nodes("s", "database") == src.search_nodes("s", "database") != []
    assert [d.path for d in dst.documents("s")] == [d.path for d in src.documents("s")]
    assert dst.load_nodes("s") == src.load_nodes("s")
    assert dst.load_messages("chat") == src.load_messages("chat")
    assert list_experts(dst) == list_experts(src)
    assert not report.skipped
    for index in (LexicalIndex, VectorIndex):  # the flat passage indexes kept in the database
        kw = {"embedder": "hash"} if index is VectorIndex else {}
        with (
            index(str(source), name="corpus", **kw) as a,
            index(str(tmp_path / "dst.db"), name="corpus", **kw) as b,
        ):
            assert len(b) == len(a) == len(FLAT_WORDS)
            assert b.search("ledgers of harbors", k=3) == a.search("ledgers of harbors", k=3) != []
    src.close()
    dst.close()
    # the copy is a working store: a question retrieves from it as from the source
    with (
        KnowTree(source, model=KeywordModel()) as a,
        KnowTree(tmp_path / "dst.db", model=KeywordModel()) as b,
    ):
        q = "which database did the team choose"
        found = b.tree("s").retrieve(q, budget_tokens=400, embedder="hash")
        assert found == a.tree("s").retrieve(q, budget_tokens=400, embedder="hash") != []


def test_a_stopped_copy_resumes_and_writes_each_row_once(source: Path, tmp_path: Path) -> None:
    src, dst = SQLiteStore(source), SQLiteStore(tmp_path / "dst.db")
    first = copy_store(src, dst, batch=3, max_batches=4)
    assert not first.complete and not first.ok
    partly = sum(t.written for t in first.tables)
    assert 0 < partly <= 12
    second = copy_store(src, dst, batch=3)
    assert second.ok
    assert partly + sum(t.written for t in second.tables) == second.rows  # nothing written twice
    assert _tables(dst) == _tables(src)
    third = copy_store(src, dst, batch=3)  # a copy run again writes nothing and still verifies
    assert third.ok and sum(t.written for t in third.tables) == 0


def test_refuses_a_destination_holding_other_data_under_the_same_key(source: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    _populate(other, tmp_path / "otherdocs", tree="s")
    dst = SQLiteStore(other)
    with dst.transaction() as c:  # the destination's own tree 's' differs from the source's
        c.execute("UPDATE trees SET model = 'their-model' WHERE name = 's'")
    before = _tables(dst)
    with pytest.raises(CopyConflictError, match=r"table 'trees' under name='s'"):
        copy_store(SQLiteStore(source), dst)
    assert _tables(dst) == before  # nothing of the destination's was replaced


def test_copies_beside_the_destinations_own_trees(source: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine.db"
    write_corpus(tmp_path / "mydocs", {"notes.md": "# Garden\n\nThe roses bloom in June near the shed."})
    with KnowTree(mine, model=KeywordModel()) as kt:
        kt.build([str(tmp_path / "mydocs")], tree="garden")
    dst = SQLiteStore(mine)
    report = copy_store(SQLiteStore(source), dst)
    assert report.ok
    assert sorted(dst.tree_names()) == ["chat", "garden", "s"]
    assert dst.search_nodes("garden", "roses")  # its own full-text rows survived the rebuild


def test_a_lost_write_is_a_verification_failure(source: Path, tmp_path: Path, monkeypatch: Any) -> None:
    real = copying._write_batch

    def lossy(dst: Any, table: Any, rows: list[tuple]) -> int:
        return real(dst, table, rows[:-1] if table.name == "nodes" else rows)

    monkeypatch.setattr(copying, "_write_batch", lossy)
    report = copy_store(SQLiteStore(source), SQLiteStore(tmp_path / "dst.db"))
    bad = [t.name for t in report.tables if not t.ok]
    assert bad == ["nodes"] and not report.ok


def test_values_are_hashed_alike_whatever_the_dialect_returned() -> None:
    # PostgreSQL returns bytea as memoryview, booleans as bool, NUMERIC as Decimal
    assert normal("vec", memoryview(b"\x00\x01")) == b"\x00\x01"
    assert normal("leaf", True) == 1
    assert normal("cost", Decimal("0.25")) == 0.25
    assert normal("meta_json", {"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert normal("meta_json", '{"b": 1}') == '{"b": 1}'  # TEXT on both dialects: compared as stored
    row = ("x", 1, 2.5, None, b"\x00")
    assert encode_row(normal_row(("a", "b", "c", "d", "e"), row)) != encode_row(("x", 1, 2.5, "", b"\x00"))
    assert encode_row(("ab", "c")) != encode_row(("a", "bc"))


def test_cli_prints_the_table_and_exits_by_the_result(source: Path, tmp_path: Path, cli: Any) -> None:
    dst = tmp_path / "dst.db"
    out = invoke(cli, "db", "copy", str(source), str(dst))
    assert "nodes" in out and "row(s) verified" in out
    data = json.loads(invoke(cli, "db", "copy", str(source), str(dst), "--json"))
    assert data["ok"] and {t["name"]: t["written"] for t in data["tables"]}["nodes"] == 0
    invoke(cli, "db", "copy", str(tmp_path / "missing.db"), str(dst), code=1)
    assert "same database" in invoke(cli, "db", "copy", str(dst), str(tmp_path / "." / "dst.db"), code=3)
    store = SQLiteStore(dst)
    store.write(lambda c: c.execute("UPDATE nodes SET text = 'changed' WHERE rowid = 1"))
    store.close()
    out = invoke(cli, "db", "copy", str(source), str(dst), code=3)
    assert "table 'nodes'" in out


# -- PostgreSQL ---------------------------------------------------------------------------------------
def test_sqlite_to_postgresql_and_back_keeps_every_hash(source: Path, tmp_path: Path, pg_url: str) -> None:
    src = SQLiteStore(source)
    pg = open_store(pg_url)
    there = copy_store(src, pg, batch=5)
    assert there.ok
    assert sorted(there.skipped) == ["lex_corpus", "lexical_indexes", "vec_corpus", "vector_indexes"]
    back = SQLiteStore(tmp_path / "back.db")
    again = copy_store(pg, back, batch=5)
    assert again.ok
    hashes = {t.name: (t.source_rows, t.source_hash) for t in there.tables}
    assert {t.name: (t.source_rows, t.source_hash) for t in again.tables} == hashes
    assert hashes["nodes"][0] > 0 and hashes["tree_index_vec"][0] > 0
    assert {k: v for k, v in _tables(back).items() if k not in there.skipped} == {
        k: v for k, v in _tables(src).items() if k not in there.skipped
    }
    for store in (pg, back):  # full-text rows derived by each destination: the same hits
        assert [i for i, _ in store.search_nodes("s", "database")] == [
            i for i, _ in src.search_nodes("s", "database")
        ]
        assert store.load_messages("chat") == src.load_messages("chat")
    # the tree index's BM25 postings, derived by PostgreSQL from the copied entries: the same ranking
    from knowtree.store import treeindex_pg, treeindex_sqlite

    ranked = src.read(lambda c: treeindex_sqlite.lexical(c, "s", ["database", "store"], 10))
    assert ranked and [
        i for i, _ in pg.read(lambda c: treeindex_pg.lexical(c, "s", ["database", "store"], 10))
    ] == [i for i, _ in ranked]
    # PostgreSQL's numbering moved past the copied ledger rows and expert ids: new rows insert
    before = max(n.id for n in list_experts(pg))
    assert add_expert(pg, "*", "a note written after the copy").id == before + 1

    pg.close()


def test_a_stopped_copy_into_postgresql_resumes(source: Path, pg_url: str) -> None:
    src, pg = SQLiteStore(source), open_store(pg_url)
    assert not copy_store(src, pg, batch=4, max_batches=5).complete
    assert copy_store(src, pg, batch=4).ok
    skipped = ("lex_corpus", "lexical_indexes", "vec_corpus", "vector_indexes")
    assert _tables_by_key(pg, src) == {k: v for k, v in _tables(src).items() if k not in skipped}
    pg.close()


def test_postgresql_destination_refuses_other_data_under_a_key(source: Path, pg_url: str) -> None:
    src, pg = SQLiteStore(source), open_store(pg_url)
    assert copy_store(src, pg).ok
    pg.write(lambda c: c.execute("UPDATE documents SET text = 'theirs' WHERE tree = 's'"))
    with pytest.raises(CopyConflictError, match=r"table 'documents' under tree='s', path="):
        copy_store(src, pg)
    pg.close()


def _tables_by_key(store: Any, keys_of: Any) -> dict[str, tuple[int, str]]:
    return {t.name: table_hash(store, t, keys_of=keys_of) for t in list_tables(keys_of) if not t.flat}


def test_postgresql_numbering_after_copying_an_empty_table(tmp_path: Path, pg_url: str) -> None:
    empty, pg = SQLiteStore(tmp_path / "empty.db"), open_store(pg_url)
    assert copy_store(empty, pg).ok
    assert add_expert(pg, "*", "the first note").id == 1  # not 2: the sequence was not used up
    pg.close()


def test_a_large_tree_copied_into_postgresql_is_searched_by_its_own_hnsw_index(
    tmp_path: Path, pg_url: str, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An SQLite file's vectors arrive as bytes: PostgreSQL derives their pgvector values (what its
    HNSW index, `ann_top` and `cosines` read), and `db copy` gives a tree of `ann_entries()` entries
    or more its own index; its dense top-k by that index is the source's exact one."""
    import psycopg

    from knowtree.retrieve.embed import get_embedder
    from knowtree.store.pgbulk import ann_index_name, has_ann_index
    from test_scale_index import _tickets

    db = tmp_path / "large.db"
    with KnowTree(db, model=KeywordModel(), summaries="none", structure="headings") as kt:
        kt.build(_tickets(tmp_path / "large", 300, files=3), tree="u")
    monkeypatch.setenv("KNOWTREE_ANN_ENTRIES", "100")
    invoke(cli, "db", "copy", str(db), pg_url)
    with psycopg.connect(pg_url) as conn:
        stored, derived = conn.execute("SELECT COUNT(*), COUNT(emb) FROM tree_index_vec").fetchone()
    assert stored > 300 and derived == stored
    emb = get_embedder()
    pg = open_store(pg_url)
    assert pg.read(lambda c: has_ann_index(c, "u", emb.id, emb.dim))
    assert pg.read(lambda c: ann_index_name("u", emb.id, emb.dim)) in [
        r[0] for r in pg.query("SELECT indexname FROM pg_indexes WHERE tablename = 'tree_index_vec'")
    ]
    pg.close()
    question = "what did carol file as code42 about item3?"
    with KnowTree(db, model=KeywordModel()) as kt:
        exact, _, _ = kt.tree_index("u").dense_top(question, emb, 10)
    with KnowTree(pg_url, model=KeywordModel()) as kt:
        near, _, _ = kt.tree_index("u").dense_top(question, emb, 10)
        assert set(near) == set(exact)
        assert all(abs(near[i] - exact[i]) < 1e-4 for i in near)
