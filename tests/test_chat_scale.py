"""Issue 13, item 6: `chat add` costs the same whatever else the database holds, full-text rows are
replaced by key, and one long topic grows O(log n) deep."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from knowtree.core import KnowTree
from knowtree.store.migrations import MIGRATIONS
from knowtree.store.sqlite import SQLiteStore
from knowtree.testing.models import KeywordModel
from knowtree.types import Node, NodeKind, NodeMeta, Span, content_hash

WORDS = "paris cat meeting tom hiking friday coffee support group moved deploy database job".split()


def chat(n: int) -> list[dict[str, Any]]:
    """One session, one long topic (every message shares words with the last ones)."""
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "name": "Ann",
            "content": " ".join(WORDS[(i + k) % len(WORDS)] for k in range(12)),
            "timestamp": 1709287200 + 60 * i,
        }
        for i in range(n)
    ]


def other_tree(store: SQLiteStore, name: str, leaves: int) -> None:
    nodes = [
        Node(
            id=content_hash(name, str(i)),
            kind=NodeKind.LEAF,
            level=0,
            meta=NodeMeta(summary=f"leaf {i} of {name}"),
            text=" ".join(f"word{(i * 7 + k) % 997}" for k in range(300)),
            spans=[Span(file="f.md", start=0, end=1, line_start=i + 1, line_end=i + 1)],
        )
        for i in range(leaves)
    ]
    root = Node(
        id=content_hash(name, "root"),
        kind=NodeKind.ROOT,
        level=1,
        children=[n.id for n in nodes],
        meta=NodeMeta(summary=name),
    )
    store.save_tree(name, root_id=root.id, nodes=[root, *nodes], documents=[], model="x", settings={})


def sqlite_work(kt: KnowTree, messages: list[dict[str, Any]]) -> int:
    """SQLite virtual-machine steps (in thousands) spent adding `messages` to a memory."""
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    kt.store._conn.set_progress_handler(tick, 1000)
    try:
        mem = kt.memory("chat")
        mem.embedder = None
        mem.add(messages)
    finally:
        kt.store._conn.set_progress_handler(None, 0)
    return steps


@pytest.mark.sqlite_only
def test_adding_messages_costs_the_same_in_a_database_full_of_other_trees(tmp_path: Path) -> None:
    messages = chat(80)
    with KnowTree(tmp_path / "empty.db", model=KeywordModel()) as kt:
        alone = sqlite_work(kt, messages)
    with KnowTree(tmp_path / "full.db", model=KeywordModel()) as kt:
        other_tree(kt.store, "docs", 1500)  # ~3 MB of other text in the full-text index
        crowded = sqlite_work(kt, messages)
    # before: every add step deleted full-text rows by an unindexed column, scanning every tree
    assert crowded <= 1.5 * alone + 50, (alone, crowded)


@pytest.mark.sqlite_only
def test_full_text_rows_follow_their_nodes_by_key(tmp_path: Path) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        other_tree(kt.store, "docs", 20)
        mem = kt.memory("chat")
        mem.embedder = None
        mem.add(chat(60))
        mem.add(chat(70)[60:])
        c = kt.store._conn
        mismatched = c.execute(
            "SELECT COUNT(*) FROM nodes n LEFT JOIN nodes_fts f ON f.rowid = n.rowid"
            " WHERE f.id IS NOT n.id OR f.tree IS NOT n.tree"
        ).fetchone()[0]
        assert mismatched == 0
        assert (
            c.execute("SELECT COUNT(*) FROM nodes_fts").fetchone()[0]
            == c.execute("SELECT COUNT(*) FROM nodes").fetchone()[0]
        )
        assert kt.store.search_nodes("docs", "word5")
        kt.delete("chat")
        assert c.execute("SELECT COUNT(*) FROM nodes_fts WHERE tree = 'chat'").fetchone()[0] == 0
        assert c.execute("SELECT COUNT(*) FROM nodes_fts").fetchone()[0] == 21


def test_one_long_topic_grows_logarithmically_deep(tmp_path: Path) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        mem = kt.memory("chat")
        mem.embedder = None
        report = mem.add(chat(900))
        nodes = kt.store.load_nodes("chat")
    # before: one level deeper every 56 messages (depth 19 here); now log_8-like
    assert report.depth <= 8, report.depth
    assert all(len(n.children) <= 8 for n in nodes.values())
    assert report.messages == 900 and sum(n.is_leaf for n in nodes.values()) == 900


def test_a_version_4_database_keeps_its_full_text_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    c = sqlite3.connect(path, isolation_level=None)
    for number, script in enumerate(MIGRATIONS[:4], 1):
        for statement in (s for s in script.split(";") if s.strip()):
            c.execute(statement)
        c.execute(f"PRAGMA user_version = {number}")
    c.execute("INSERT INTO trees(name, root_id, created, updated) VALUES ('t', 'r', 'now', 'now')")
    c.execute(
        "INSERT INTO nodes(tree, id, kind, level, position, children_json, meta_json, text)"
        " VALUES ('t', 'r', 'root', 1, 0, '[]', '{}', 'the lighthouse keeper')"
    )
    c.execute("INSERT INTO nodes_fts(tree, id, body) VALUES ('t', 'r', 'the lighthouse keeper')")
    c.close()
    store = SQLiteStore(path)
    try:
        assert store.search_nodes("t", "lighthouse") and store.search_nodes("t", "lighthouse")[0][0] == "r"
        row = store._conn.execute("SELECT f.rowid = n.rowid FROM nodes_fts f, nodes n").fetchone()
        assert row == (1,)
    finally:
        store.close()


def test_pack_run_groups_the_lowest_older_children_and_never_the_last() -> None:
    from knowtree.construct.rebalance import pack_run

    assert pack_run([1] * 8, 8) is None  # fits
    assert pack_run([1] * 9, 8) == (0, 8)  # eight subtopics become one group; the last stays
    assert pack_run([3, 2, 2, 2, 2, 2, 2, 1, 1], 8) == (1, 8)  # the lowest run of two or more (levels ≤ 2)
    assert pack_run([4, 3, 2, 1, 4, 3, 2, 1, 1], 8) == (2, 4)  # no equal run: the lowest pair that fits
