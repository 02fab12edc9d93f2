"""Deleting one message of a conversation memory: only that message goes, positions never shift."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from knowtree.cli.app import app
from knowtree.core import KnowTree
from knowtree.errors import NotFoundError
from knowtree.testing.models import KeywordModel

SECRET = "zebrapassword42"


def _chat() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for i in range(1, 13):
        topic = "garden" if i <= 6 else "marathon"
        content = f"My pin is {SECRET}, keep it safe." if i == 4 else f"Message {i} about my {topic} plans."
        msgs.append({"role": "user" if i % 2 else "assistant", "name": "Ann" if i % 2 else None,
                     "content": content, "timestamp": f"2024-05-01T10:{i:02d}"})
    return msgs


@pytest.fixture()
def kt(tmp_path: Path) -> KnowTree:
    k = KnowTree(tmp_path / "kb.db", model=KeywordModel())
    k.memory("chat").add(_chat(), batch_size=3)
    yield k
    k.close()


def _everything(db: Path) -> str:
    """Every row of the database that could hold a memory's text (the LLM cache aside)."""
    c = sqlite3.connect(db)
    out = []
    for table in ("messages", "nodes", "nodes_fts", "trees", "tree_index", "tree_index_fts"):
        out += [json.dumps(r, default=str) for r in c.execute(f"SELECT * FROM {table}")]
    return "\n".join(out)


@pytest.mark.sqlite_only
def test_delete_one_message_keeps_every_other_position_and_citation(kt: KnowTree, tmp_path: Path) -> None:
    mem = kt.memory("chat")
    mem.context("marathon plans", use_model=False)  # the memory's tree index exists now
    before = {int(r["position"]): r for r in mem.messages()}  # type: ignore[call-overload]
    nodes_before = kt.store.load_nodes("chat")
    assert SECRET in _everything(tmp_path / "kb.db")

    report = mem.delete_message(4)

    after = {int(r["position"]): r for r in mem.messages()}  # type: ignore[call-overload]
    assert sorted(after) == [p for p in sorted(before) if p != 4]
    assert all(after[p] == before[p] for p in after)  # verbatim, same position, same leaf id
    assert report.messages == 11 and report.position == 4 and before[4]["node_id"] in report.removed
    assert report.refreshed and report.usage.calls >= 1  # the summaries that described it, written again
    nodes = kt.store.load_nodes("chat")
    assert before[4]["node_id"] not in nodes
    leaves = {n.id: n for n in nodes.values() if n.is_leaf}
    assert {str(r["node_id"]) for r in after.values()} == set(leaves)
    for p, r in after.items():  # each leaf still cites its own position
        assert leaves[str(r["node_id"])].spans[0].line_start == p
    # the topic it sat under is still there, in its place (same id), now spanning what is left
    topic = next(n for n in nodes_before.values() if before[4]["node_id"] in n.children)
    assert topic.id in nodes and before[4]["node_id"] not in nodes[topic.id].children
    assert SECRET not in _everything(tmp_path / "kb.db")  # rows, summaries, state, index: gone

    # the next message gets a new position (13), never 4 again
    add = mem.add([{"role": "user", "content": "And one more about the marathon."}])
    assert add.messages == 12
    assert max(int(r["position"]) for r in mem.messages()) == 13  # type: ignore[call-overload]
    answer = mem.ask("What are the marathon plans?")
    assert all(c.line_start != 4 for c in answer.citations)
    with pytest.raises(NotFoundError):
        mem.delete_message(4)


def test_deleting_a_topic_s_only_message_removes_the_topic(tmp_path: Path) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as k:
        mem = k.memory("m")
        mem.add([{"role": "user", "content": "first", "timestamp": "2024-01-01T10:00"}])
        mem.add([{"role": "user", "content": "second, a week later", "timestamp": "2024-01-08T10:00"}])
        root = k.store.root_id("m")
        assert len(k.store.load_nodes("m")[root].children) == 2  # two sessions
        mem.delete_message(2)
        nodes = k.store.load_nodes("m")
        assert len(nodes[root].children) == 1 and [r["position"] for r in mem.messages()] == [1]
        mem.add([{"role": "user", "content": "third", "timestamp": "2024-01-08T11:00"}])
        assert [r["position"] for r in mem.messages()] == [1, 3]


def test_cli_chat_rm_message(kt: KnowTree, tmp_path: Path) -> None:
    db = str(tmp_path / "kb.db")
    kt.close()
    runner = CliRunner()
    out = runner.invoke(app, ["chat", "rm", "chat", "--message", "4", "--model", "keyword", "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["position"] == 4
    shown = runner.invoke(app, ["show", "chat", "--db", db])
    assert shown.exit_code == 0 and SECRET not in shown.output
    text = runner.invoke(app, ["chat", "rm", "chat", "--message", "5", "--model", "keyword", "--db", db])
    assert text.exit_code == 0 and "message 5 deleted" in text.output
    missing = runner.invoke(app, ["chat", "rm", "chat", "--message", "4", "--model", "keyword", "--db", db])
    assert missing.exit_code == 1 and "no message at position 4" in missing.output


def test_importing_the_same_file_again_skips_what_was_stored_and_what_was_deleted(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in _chat()))
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as k:
        mem = k.memory("chat")
        mem.add_file(path)
        mem.delete_message(4)
        mem.delete_message(12)  # the last one too
        again = mem.add_file(path)
        assert again.added == 0 and again.skipped == 12 and again.messages == 10
        with path.open("a") as f:
            f.write(json.dumps({"role": "user", "content": "A new one."}) + "\n")
        more = mem.add_file(path)
        assert more.added == 1 and [int(r["position"]) for r in mem.messages()][-1] == 13


@pytest.mark.sqlite_only
def test_deleting_every_message_leaves_none_of_their_words(tmp_path: Path) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as k:
        mem = k.memory("m")
        mem.add(_chat(), batch_size=3)
        for p in (4, 1, 12, 7, 2, 3, 5, 6, 8, 9, 10, 11):
            mem.delete_message(p)
        words = _everything(tmp_path / "kb.db")
        assert SECRET not in words and "garden" not in words and "marathon" not in words
        assert k.tree("m").info.nodes == 1 and mem.messages() == []
        mem.add([{"role": "user", "content": "Starting over."}])
        assert [r["position"] for r in mem.messages()] == [13]
