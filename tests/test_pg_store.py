"""The PostgreSQL store (issue 36): opened by URL, the schema from the one migration history, the
sqlite3-like connection handle, errors by kind, and the CLI on a `postgresql://` database."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import psycopg.sql
import pytest

import knowtree
from conftest import invoke, write_corpus
from knowtree.core import KnowTree
from knowtree.store import PostgresStore, SQLiteStore, dialect, open_store
from knowtree.store.migrations import MIGRATIONS
from knowtree.store.migrations_pg import PG_BASELINE_VERSION
from knowtree.store.pgconn import qmark_to_format


# -- qmark placeholders (no database needed) -----------------------------------------------------------
@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("SELECT a FROM t WHERE x = ? AND y = ?", "SELECT a FROM t WHERE x = %s AND y = %s"),
        ("SELECT '?', ? FROM t", "SELECT '?', %s FROM t"),  # a ? inside a string stays
        ("SELECT 'it''s ?' || ?", "SELECT 'it''s ?' || %s"),  # a doubled quote does not end it
        ('SELECT "odd?col" FROM t WHERE v = ?', 'SELECT "odd?col" FROM t WHERE v = %s'),
        ("SELECT 'a%b' WHERE v LIKE ? -- 50% ?\n", "SELECT 'a%%b' WHERE v LIKE %s -- 50%% ?\n"),
        ("SELECT 5 % 2, ? /* ? */", "SELECT 5 %% 2, %s /* ? */"),
        ("SELECT $x$ ? $x$, ?", "SELECT $x$ ? $x$, %s"),
    ],
)
def test_qmark_placeholders_become_psycopg_ones_outside_quotes(sql: str, want: str) -> None:
    assert qmark_to_format(sql) == want


@pytest.mark.sqlite_only  # opens a file path: the PostgreSQL test mode redirects it to a database
def test_a_url_names_postgresql_anything_else_a_sqlite_file(tmp_path: Any) -> None:
    assert dialect.is_url("postgresql://u@h/db") and dialect.is_url("postgres://u@h/db")
    assert not dialect.is_url(str(tmp_path / "kb.db")) and not dialect.is_url(":memory:")
    store = open_store(tmp_path / "kb.db")
    assert isinstance(store, SQLiteStore) and store.dialect == "sqlite"
    store.close()


# -- on the session's PostgreSQL ---------------------------------------------------------------------
def test_open_store_and_knowtree_open_take_a_url(pg_url: str, corpus: list[str]) -> None:
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore) and store.dialect == "postgresql"
    store.close()
    kt = knowtree.open(pg_url, model="keyword", read_env=False, summaries="none")
    kt.build(corpus, tree="docs")
    kt.close()
    again = KnowTree(pg_url, create=False, read_env=False)  # no file to find: the database exists
    assert again.store.tree_names() == ["docs"]
    assert again.store.tree_info("docs").documents == 3
    again.close()


def test_every_table_and_column_of_the_sqlite_schema_exists_on_postgresql(pg_url: str) -> None:
    lite = SQLiteStore(":memory:")
    fts = {"nodes_fts", "tree_index_fts"}  # FTS5: PostgreSQL's search is a column (nodes_fts) or later
    tables = {
        r[0]
        for r in lite.query("SELECT name FROM sqlite_master WHERE type = 'table'")
        if r[0] != "sqlite_sequence" and not any(r[0].startswith(f"{f}_") for f in fts) and r[0] not in fts
    }
    pg = PostgresStore(pg_url)
    pg_tables = {r[0] for r in pg.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert tables <= pg_tables, tables - pg_tables
    for table in sorted(tables):
        columns = {r[1] for r in lite.query(f"PRAGMA table_info({table})")}
        pg_columns = {
            r[0] for r in pg.query("SELECT column_name FROM information_schema.columns WHERE table_name = ?", (table,))
        }
        assert columns <= pg_columns, (table, columns - pg_columns)
    assert pg.query("SELECT version FROM schema_version") == [(len(MIGRATIONS),)]
    assert len(MIGRATIONS) >= PG_BASELINE_VERSION
    assert pg.query("SELECT extname FROM pg_extension WHERE extname = 'vector'") == [("vector",)]
    pg.close()
    lite.close()


def test_two_processes_opening_a_fresh_database_at_once_both_succeed(pg_server: Any) -> None:
    """The migrations run under an advisory lock: the second opener waits, then finds the schema."""
    import uuid

    name = f"fresh_{uuid.uuid4().hex[:12]}"
    pg_server._sql(f"CREATE DATABASE {name}")  # empty: no schema yet
    url = pg_server.url_of(name)
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def opener() -> None:
        try:
            barrier.wait()
            PostgresStore(url, pool_size=1).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pg_server._sql(f"DROP DATABASE {name} WITH (FORCE)")
    assert errors == []


def test_the_handle_reads_like_sqlite3_and_errors_are_caught_by_kind(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    with store.transaction() as c:
        c.execute("INSERT INTO tenants(name, created) VALUES (?, ?)", ("acme", "2026-01-01"))
        c.executemany("INSERT INTO tenants(name, created) VALUES (?, ?)", [("b", "x"), ("c", "100%")])
        cur = c.execute("UPDATE tenants SET created = ? WHERE name <> ?", ("y", "acme"))
        assert cur.rowcount == 2
        assert c.execute("SELECT name FROM tenants WHERE name = ?", ("acme",)).fetchone() == ("acme",)
        assert [r[0] for r in c.execute("SELECT name FROM tenants ORDER BY name")] == ["acme", "b", "c"]
        assert c.execute("SELECT 1 WHERE 1 = 0").fetchone() is None
    assert store.read(lambda c: c.execute("SELECT COUNT(*) FROM tenants").fetchone()[0]) == 3
    with pytest.raises(dialect.IntegrityError), store.transaction() as c:
        c.execute("INSERT INTO tenants(name, created) VALUES (?, ?)", ("acme", "again"))
    assert issubclass(psycopg.IntegrityError, dialect.IntegrityError)  # type: ignore[arg-type]
    with pytest.raises(dialect.DatabaseError):
        store.query("SELECT * FROM no_such_table")
    assert store.query("SELECT COUNT(*) FROM tenants") == [(3,)]  # the failed transaction left nothing
    store.close()


def test_a_failed_save_keeps_the_previous_tree(pg_url: str) -> None:
    from knowtree.errors import StoreError
    from knowtree.types import Node, NodeKind, NodeMeta

    store = PostgresStore(pg_url)
    leaf = Node(id="a", kind=NodeKind.LEAF, level=0, meta=NodeMeta(summary="kept"), text="kept text")
    store.save_tree("t", root_id="a", nodes=[leaf], documents=[], model="m", settings={})

    def boom(_c: Any, _name: str, _nodes: Any) -> None:
        raise psycopg.errors.UniqueViolation("simulated")

    store.on_save_tree(boom)
    other = Node(id="b", kind=NodeKind.LEAF, level=0, meta=NodeMeta(summary="new"), text="new text")
    with pytest.raises(StoreError, match="previous version is kept"):
        store.save_tree("t", root_id="b", nodes=[other], documents=[], model="m", settings={})
    assert set(store.load_nodes("t")) == {"a"}
    assert store.search_nodes("t", "kept")[0][0] == "a"
    store.close()


def test_the_cli_builds_asks_and_lists_on_a_url(pg_url: str, cli: Any, tmp_path: Any) -> None:
    docs = write_corpus(tmp_path / "docs")
    invoke(cli, "build", *docs, "--tree", "docs", "--db", pg_url, "--model", "keyword", "--summaries", "none")
    out = invoke(cli, "ask", "docs", "Who approved the marketing budget?", "--db", pg_url, "--model", "keyword")
    assert "budget.md" in out
    assert "docs" in invoke(cli, "trees", "--db", pg_url)
    assert "build" in invoke(cli, "ledger", "--db", pg_url)
    assert "ok" in invoke(cli, "check", "--db", pg_url)


def test_the_eval_tree_method_keeps_its_working_tree_in_the_db_url(pg_url: str) -> None:
    """`knowtree eval … --db URL`: the `tree` method's corpus tree and index live in that database."""
    from knowtree.retrieve import Passage
    from knowtree_eval import datasets as ds
    from knowtree_eval.base import CorpusContext
    from knowtree_eval.treemethod import TreeMethod

    corpus = ds.Corpus("story")
    for i, text in enumerate(["The lighthouse keeper sang.", "A storm broke the mast.", "Nobody found the map."]):
        corpus.add(Passage(f"p{i}", text, doc="story"))
    method = TreeMethod(budget=30, use_dense=False)
    built = method.built(CorpusContext(corpus, db=pg_url))
    assert "lighthouse" in " ".join(ev.text for ev in method.search(built, "Who sang?").evidence)
    store = open_store(pg_url)
    assert store.tree_names() == ["story"]
    store.close()


def test_a_knowledge_bases_passage_indexes_live_in_the_postgresql_database(pg_url: str) -> None:
    """Kept in the database itself (store/flatindex_pg.py), so another process finds them (they were
    refused on PostgreSQL before: SQLite tables would have been lost between processes)."""
    from knowtree.retrieve.bm25 import Passage

    kt = KnowTree(pg_url, model="keyword", read_env=False)
    kt.kb("hp").indexes("hash").add("chunks", [Passage("c1", "Reset the printer by holding the power button")])
    kt.close()
    again = KnowTree(pg_url, model="keyword", read_env=False)
    indexes = again.kb("hp").indexes("hash")
    assert indexes.count("chunks") == 1
    assert [pid for pid, _ in indexes.lexical("chunks").search("how to reset the printer", 3)] == ["c1"]
    again.close()


def test_cache_and_ledger_rows_commit_without_waiting_for_the_disk_and_nothing_else_does(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two derivable rows per model call (cache, ledger) commit with `synchronous_commit = off` for
    their own transaction only; every other write (trees, messages, jobs) keeps the server's setting."""
    from knowtree.llm.base import Completion
    from knowtree.types import Usage

    with psycopg.connect(pg_url, autocommit=True) as conn:  # the test server runs with it off
        name = conn.execute("SELECT current_database()").fetchone()[0]
        conn.execute(psycopg.sql.SQL("ALTER DATABASE {} SET synchronous_commit = on").format(psycopg.sql.Identifier(name)))
    store = PostgresStore(pg_url)
    seen: list[str] = []
    real = PostgresStore._derived_write

    def spy(self: PostgresStore, c: Any) -> None:
        real(self, c)
        seen.append(c.execute("SHOW synchronous_commit").fetchone()[0])

    monkeypatch.setattr(PostgresStore, "_derived_write", spy)
    try:
        store.cache_put("k", "m", Completion(text="x", input_tokens=1, output_tokens=1, finish_reason="stop"))
        store.record_call(run_id=None, key="k", model_id="m", purpose="p", cached=False, usage=Usage(calls=1),
                          error=None)
        assert seen == ["off", "off"]
        with store.transaction() as c:  # SET LOCAL: the next transaction is back to the default
            assert c.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        assert store.cache_get("k") is not None and store.query("SELECT COUNT(*) FROM llm_calls")[0][0] == 1
    finally:
        store.close()


def test_a_model_calls_cache_read_is_one_statement_and_its_writes_one_pipeline(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a transaction of the thread, `cache_get` runs in autocommit (no BEGIN/COMMIT round
    trips) and the cache and ledger writes are sent as one pipeline each (BEGIN, settings, INSERT,
    COMMIT: one round trip), a fresh reply's two rows (`put_reply`) as one pipeline together; inside
    the thread's transaction all of them join it, and see its rows."""
    from knowtree.llm.base import Completion
    from knowtree.store import pgconn
    from knowtree.types import Usage

    store = PostgresStore(pg_url)
    seen: list[tuple[str, bool, bool]] = []
    real = pgconn.Connection.execute

    def spy(self: pgconn.Connection, sql: str, args: Any = ()) -> Any:
        if "llm_" in sql:
            seen.append((sql.split()[0], self.raw.autocommit, self.raw.pgconn.pipeline_status != 0))
        return real(self, sql, args)

    monkeypatch.setattr(pgconn.Connection, "execute", spy)
    reply = Completion(text="x", input_tokens=1, output_tokens=1, finish_reason="stop")
    try:
        assert store.cache_get("k") is None
        store.cache_put("k", "m", reply)
        store.record_call(run_id=None, key="k", model_id="m", purpose="p", cached=False, usage=Usage(calls=1),
                          error=None)
        assert seen == [("SELECT", True, False), ("INSERT", False, True), ("INSERT", False, True)]
        assert store.cache_get("k") is not None
        seen.clear()
        pipelines: list[Any] = []  # the objects, kept alive: two pipelines cannot share an id

        def spy_pipeline(self: pgconn.Connection, sql: str, args: Any = ()) -> Any:
            pipelines.append(self.raw._pipeline)  # the psycopg pipeline the statement was sent in
            return spy(self, sql, args)

        monkeypatch.setattr(pgconn.Connection, "execute", spy_pipeline)
        store.put_reply("k5", "m", reply, run_id=None, purpose="p", usage=Usage(calls=1))
        assert seen == [("INSERT", False, True), ("INSERT", False, True)] and len({id(p) for p in pipelines}) == 1
        assert store.cache_get("k5") is not None
        assert store.query("SELECT COUNT(*) FROM llm_calls WHERE key = 'k5' AND cached = 0")[0][0] == 1
        monkeypatch.setattr(pgconn.Connection, "execute", spy)
        seen.clear()
        with store.transaction():  # nested: the thread's own transaction, its rows visible
            store.cache_put("k2", "m", reply)
            assert store.cache_get("k2") is not None
        assert seen == [("INSERT", False, False), ("SELECT", False, False)]
        assert store.query("SELECT COUNT(*) FROM llm_cache")[0][0] == 3
        with store.transaction():
            store.cache_put("k3", "m", reply)
            store.query("SELECT 1")
        # a nested write in a transaction that fails is rolled back with it
        with pytest.raises(psycopg.Error), store.transaction():
            store.cache_put("k4", "m", reply)
            store.query("SELECT no_such_column FROM llm_cache")
        assert store.cache_get("k4") is None and store.cache_get("k3") is not None
    finally:
        store.close()


def test_entries_written_in_many_batches_have_the_statistics_and_ranking_of_one(pg_url: str) -> None:
    """`write_entries` in batches of 3 (each batch's terms cut ahead in a thread, the statistics
    upserted once at the end) stores what one `insert_entries` of every row stores: the same
    postings, document frequencies, totals and BM25 ranking."""
    from knowtree.retrieve.indexwrite import write_entries
    from knowtree.store import treeindex_pg

    words = "budget launch review ticket owner deploy cache index invoice region".split()
    texts = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(5 + i % 4)) for i in range(20)]

    def rows(tree: str) -> list[tuple]:
        return [(tree, f"e{i}", f"n{i}", None, 1, i, f"h{i}", f"b{i}", t, "ctx" if i % 2 else "", "{}", "")
                for i, t in enumerate(texts)]

    store = PostgresStore(pg_url)
    try:
        with store.transaction() as c:
            treeindex_pg.insert_entries(c, rows("one"))
            write_entries(c, "many", rows("many"), None, batch=3)
        for table, cols in (("tree_index_df", "term, docs"), ("tree_index_stats", "entries, tokens")):
            one, many = (store.query(f"SELECT {cols} FROM {table} WHERE tree = ? ORDER BY 1", (t,))
                         for t in ("one", "many"))
            assert one == many and one
        postings = (
            "SELECT t.id, p.term, p.tf, p.len FROM (SELECT b.tree, b.term, u.rid, u.tf, u.len FROM tree_index_postings b,"
            " unnest(b.rids, b.tfs, b.lens) AS u(rid, tf, len)) p JOIN tree_index t ON t.rid = p.rid"
        )
        one, many = (sorted(store.query(f"{postings} WHERE p.tree = ?", (t,))) for t in ("one", "many"))
        assert one == many
        with store.transaction() as c:
            for query in (["budget", "owner"], ["invoice"], ["ctx", "deploy", "region"]):
                assert treeindex_pg.lexical(c, "one", query, 10) == treeindex_pg.lexical(c, "many", query, 10)
    finally:
        store.close()
