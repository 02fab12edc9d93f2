"""SQLiteStore and PostgresStore (the `store` fixture runs on both): migrations, atomic tree replacement, node round trips, search, runs and the ledger."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import open_test_store
from knowtree.errors import NotFoundError, StoreError
from knowtree.store import SQLiteStore
from knowtree.store.migrations import MIGRATIONS
from knowtree.types import Document, Node, NodeKind, NodeMeta, Span, Usage


def doc(path: str, text: str) -> Document:
    return Document(path=path, text=text, sha256=hashlib.sha256(text.encode()).hexdigest())


def small_tree(prefix: str, words: tuple[str, str]) -> tuple[str, list[Node], list[Document]]:
    """A root over two leaves, with ids prefixed so trees can be told apart."""
    a_text = f"The {words[0]} report was filed on Monday."
    b_text = f"The {words[1]} review happened on Friday."
    a = Node(
        id=f"{prefix}-a",
        kind=NodeKind.LEAF,
        level=0,
        meta=NodeMeta(
            summary=f"About the {words[0]} report.",
            content_types=["Status reports & updates"],
            critical_actions=["file the report"],
            decisions=["report monthly"],
            noteworthy_events=["report filed"],
            about=["Monday"],
            unlisted_types=["Weird type"],
        ),
        text=a_text,
        spans=[Span(file="a.md", start=0, end=len(a_text), line_start=1, line_end=1)],
    )
    b = Node(
        id=f"{prefix}-b",
        kind=NodeKind.LEAF,
        level=0,
        meta=NodeMeta(summary=f"About the {words[1]} review.", fallback="metadata reply stayed invalid"),
        text=b_text,
        spans=[Span(file="b.md", start=0, end=len(b_text), line_start=1, line_end=3)],
    )
    root = Node(
        id=f"{prefix}-root",
        kind=NodeKind.ROOT,
        level=1,
        meta=NodeMeta(summary="Reports and reviews."),
        children=[a.id, b.id],
        spans=[*a.spans, *b.spans],
    )
    return root.id, [a, b, root], [doc("a.md", a_text), doc("b.md", b_text)]


def save(
    store: SQLiteStore, name: str, prefix: str, words: tuple[str, str] = ("quarterly", "design")
) -> None:
    root_id, nodes, docs = small_tree(prefix, words)
    store.save_tree(name, root_id=root_id, nodes=nodes, documents=docs, model="keyword", settings={"x": 1})


@pytest.fixture(params=["sqlite", "postgresql"])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SQLiteStore]:
    s = open_test_store(request.param, request, tmp_path / "kb.db")
    yield s
    s.close()


# -- opening and migrations ------------------------------------------------------------------------


def test_new_database_is_migrated_to_the_latest_version(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "kb.db").close()
    conn = sqlite3.connect(tmp_path / "kb.db")
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()
    assert {"trees", "documents", "nodes", "nodes_fts", "llm_cache", "llm_calls", "runs"} <= tables


def test_reopening_keeps_the_data(tmp_path: Path) -> None:
    first = SQLiteStore(tmp_path / "kb.db")
    save(first, "t", "x")
    first.close()
    second = SQLiteStore(tmp_path / "kb.db")
    try:
        assert second.tree_names() == ["t"]
        assert set(second.load_nodes("t")) == {"x-a", "x-b", "x-root"}
    finally:
        second.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        SQLiteStore(path)


@pytest.mark.parametrize("content", [b"this is not a database, just some text\n" * 20, os.urandom(4096)])
def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    with pytest.raises(StoreError) as info:
        SQLiteStore(path)
    assert "notes.db" in str(info.value)
    assert path.read_bytes() == content  # and left alone


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        SQLiteStore(tmp_path)


def test_in_memory_store_works() -> None:
    s = SQLiteStore(":memory:")
    save(s, "t", "m")
    assert s.tree_info("t").nodes == 3
    s.close()


# -- trees -----------------------------------------------------------------------------------------


def test_load_nodes_round_trip(store: SQLiteStore) -> None:
    root_id, nodes, docs = small_tree("r", ("quarterly", "design"))
    store.save_tree("t", root_id=root_id, nodes=nodes, documents=docs, model="keyword", settings={})
    loaded = store.load_nodes("t")
    assert loaded == {n.id: n for n in nodes}  # meta (all fields), spans, children, text, kind, level
    assert store.root_id("t") == root_id
    assert store.documents("t") == docs


def test_save_tree_replaces_the_old_version_and_leaves_other_trees_alone(store: SQLiteStore) -> None:
    save(store, "t", "old", ("quarterly", "design"))
    save(store, "other", "o", ("annual", "budget"))
    created = store.tree_info("t").created
    save(store, "t", "new", ("weekly", "safety"))
    assert set(store.load_nodes("t")) == {"new-a", "new-b", "new-root"}
    assert set(store.load_nodes("other")) == {"o-a", "o-b", "o-root"}
    assert store.root_id("t") == "new-root"
    assert store.tree_info("t").created == created  # a rebuild keeps the creation time
    # the search index was replaced too: the old words are gone, the new ones found
    assert store.search_nodes("t", "quarterly") == []
    assert store.search_nodes("t", "safety")
    assert store.search_nodes("other", "annual")


def test_failed_save_leaves_the_old_tree(store: SQLiteStore) -> None:
    save(store, "t", "old")
    _, nodes, docs = small_tree("new", ("weekly", "safety"))
    duplicate = [*nodes, nodes[0]]  # a primary-key clash halfway through the insert
    with pytest.raises(StoreError, match="previous version is kept"):
        store.save_tree("t", root_id="new-root", nodes=duplicate, documents=docs, model="m", settings={})
    assert set(store.load_nodes("t")) == {"old-a", "old-b", "old-root"}
    assert store.root_id("t") == "old-root"
    assert store.search_nodes("t", "quarterly")


def test_search_nodes_finds_words_in_metadata_and_text(store: SQLiteStore) -> None:
    save(store, "t", "s")
    hits = store.search_nodes("t", "Friday")  # only in leaf b's text
    assert [h[0] for h in hits] == ["s-b"]
    assert {h[0] for h in store.search_nodes("t", "monthly")} == {"s-a"}  # a decision
    assert store.search_nodes("t", "") == []
    assert store.search_nodes("t", "?! -") == []  # punctuation only: nothing to match, no FTS error
    assert store.search_nodes("t", 'quarterly" OR "x') != []  # quotes cannot break the query
    assert store.search_nodes("missing", "Friday") == []


def test_full_text_rows_follow_their_node_rows_whatever_rowids_sqlite_gives(tmp_path: Path) -> None:
    """SQLite: a node's full-text row is keyed by its node row's rowid, read back after the insert; where
    SQLite gives rowids that are not above the last (its largest rowid taken: it picks free ones), each
    is looked up by id instead. Either way every word finds its own node, and a replaced tree leaves
    no full-text row of the old one."""
    store = SQLiteStore(tmp_path / "r.db")
    save(store, "a", "x")
    save(store, "b", "y")
    assert [h[0] for h in store.search_nodes("b", "Friday")] == ["y-b"]
    assert [h[0] for h in store.search_nodes("a", "Friday")] == ["x-b"]
    with sqlite3.connect(tmp_path / "r.db") as raw:  # the largest rowid SQLite has: new rows get random ones
        raw.execute(
            "INSERT INTO nodes(rowid, tree, id, kind, level, position, children_json, meta_json)"
            " VALUES (9223372036854775807, 'a', 'filler', 'leaf', 0, 9, '[]', '{}')"
        )
    save(store, "c", "z")
    assert [h[0] for h in store.search_nodes("c", "Friday")] == ["z-b"]
    assert {h[0] for h in store.search_nodes("c", "monthly")} == {"z-a"}
    save(store, "b", "w")  # replaced: the old rows' words are gone with them
    assert [h[0] for h in store.search_nodes("b", "Friday")] == ["w-b"]
    with sqlite3.connect(tmp_path / "r.db") as raw:
        orphans = raw.execute("SELECT COUNT(*) FROM nodes_fts f WHERE f.rowid NOT IN (SELECT rowid FROM nodes)")
        assert orphans.fetchone()[0] == 0


def test_tree_info_counts(store: SQLiteStore) -> None:
    save(store, "t", "c")
    info = store.tree_info("t")
    assert (info.name, info.root_id, info.documents, info.nodes, info.leaves, info.depth, info.model) == (
        "t",
        "c-root",
        2,
        3,
        2,
        1,
        "keyword",
    )
    assert info.created and info.updated


def test_delete_tree(store: SQLiteStore) -> None:
    save(store, "t", "d")
    save(store, "keep", "k")
    store.delete_tree("t")
    assert store.tree_names() == ["keep"]
    assert not store.tree_exists("t")
    assert store.documents("t") == []
    assert store.search_nodes("t", "quarterly") == []
    assert store._query("SELECT COUNT(*) FROM nodes WHERE tree = 't'") == [(0,)]
    assert len(store.load_nodes("keep")) == 3
    with pytest.raises(NotFoundError):
        store.delete_tree("t")


def test_missing_tree_error_lists_the_known_trees(store: SQLiteStore) -> None:
    with pytest.raises(NotFoundError, match="none yet"):
        store.load_nodes("nope")
    save(store, "alpha", "a")
    save(store, "beta", "b")
    for call in (store.load_nodes, store.tree_info, store.root_id):
        with pytest.raises(NotFoundError) as info:
            call("nope")
        message = str(info.value)
        assert "'nope'" in message and "alpha" in message and "beta" in message


# -- cache, runs, ledger ---------------------------------------------------------------------------


def test_cache_round_trip(store: SQLiteStore) -> None:
    from knowtree.llm.base import Completion

    assert store.cache_get("k") is None
    c = Completion(text='{"a": 1}', input_tokens=3, output_tokens=2, finish_reason="stop")
    store.cache_put("k", "m", c)
    assert store.cache_get("k") == c


def test_run_usage_aggregates_the_ledger(store: SQLiteStore) -> None:
    run = store.start_run("build", "t", detail="a.md b.md")
    other = store.start_run("ask", "t", detail="why?")
    rows = [
        (run, False, Usage(calls=1, input_tokens=100, output_tokens=10, cost_usd=0.01, seconds=1.5), None),
        (run, True, Usage(cached=1), None),
        (run, False, Usage(calls=1, seconds=0.5), "ModelCallError: boom"),
        (other, False, Usage(calls=1, input_tokens=7, output_tokens=3), None),
    ]
    for run_id, cached, usage, error in rows:
        store.record_call(
            run_id=run_id, key="k", model_id="m", purpose="leaf_meta", cached=cached, usage=usage, error=error
        )
    usage = store.run_usage(run)
    assert (usage.calls, usage.cached, usage.input_tokens, usage.output_tokens) == (2, 1, 100, 10)
    assert usage.cost_usd == pytest.approx(0.01) and usage.seconds == pytest.approx(2.0)
    assert store.run_usage("no-such-run") == Usage()
    store.finish_run(run, "ok")
    runs = store.runs()
    assert [r["id"] for r in runs] == [other, run]  # newest first
    assert runs[1]["status"] == "ok" and runs[1]["finished"] and runs[1]["detail"] == "a.md b.md"
    assert runs[0]["status"] == "running" and runs[0]["finished"] is None
    assert runs[1]["usage"]["calls"] == 2 and runs[0]["usage"]["input_tokens"] == 7
    assert store.runs(tree="elsewhere") == []
    assert len(store.runs(limit=1)) == 1
