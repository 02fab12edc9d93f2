"""Issue 35, item 12: `export` then `import` gives the same tree back.

PageIndex: node ids, spans (characters, lines, pages) and texts identical after an import into a
fresh database, for a PDF tree, a Markdown collection and a chunk tree. ChatIndex: a memory's export
imports as a memory again, messages verbatim (positions, speakers, times, sessions) and the same
topic tree; a plain ChatIndex file (no knowtree additions) imports too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import invoke as run
from knowtree.core import KnowTree
from pdf_maker import filler, make_pdf, with_outline

KW = ("--model", "keyword")


def nodes_of(db: str, tree: str) -> tuple[str, dict[str, Any]]:
    with KnowTree(db, create=False) as kt:
        t = kt.tree(tree)
        return t.root.id, {
            n.id: (n.kind, n.children, n.text, n.spans, n.meta.title, n.meta.summary) for n in t.nodes.values()
        }


def round_trip(cli: CliRunner, tree: str) -> None:
    exported = run(cli, "export", tree, "--db", "kb.db")
    Path("tree.json").write_text(exported, encoding="utf-8")
    run(cli, "import", "tree.json", "--tree", "back", "--db", "fresh.db")
    root, before = nodes_of("kb.db", tree)
    root_after, after = nodes_of("fresh.db", "back")
    assert root_after == root
    assert after.keys() == before.keys()  # every node id kept
    for nid, (kind, children, text, spans, title, summary) in before.items():
        assert after[nid] == (kind, children, text, spans, title, summary), nid
    assert not any(s.start == s.end == 0 for v in after.values() for s in v[3] if v[2])  # no "file:0-0"
    again = run(cli, "export", "back", "--db", "fresh.db")
    assert json.loads(again)["structure"] == json.loads(exported)["structure"]


def test_pageindex_round_trip_of_a_pdf_tree_keeps_ids_spans_and_pages(cli: CliRunner) -> None:
    Path("docs").mkdir()
    pages = [["Report"], ["Chapter 1 Revenue", *filler("revenue", 20)], ["Chapter 2 Costs", *filler("costs", 20)]]
    pages.append(["2.1 Staff costs", *filler("staff", 20)])
    plain = make_pdf(Path("plain.pdf"), pages)
    with_outline(
        plain,
        Path("docs/report.pdf"),
        [("Chapter 1 Revenue", 1, 1), ("Chapter 2 Costs", 1, 2), ("2.1 Staff costs", 2, 3)],
    )
    run(cli, "build", "docs/report.pdf", "--tree", "fin", "--db", "kb.db", "-q", *KW)
    round_trip(cli, "fin")
    _, after = nodes_of("fresh.db", "back")
    assert any(s.page_start == 4 for v in after.values() for s in v[3])  # pages kept


@pytest.mark.sqlite_only
def test_pageindex_round_trip_of_a_markdown_collection_and_a_chunk_tree(cli: CliRunner) -> None:
    Path("docs").mkdir()
    Path("docs/a.md").write_text("# A\n\nAlpha intro.\n\n## A1\n\nThe alpha code is 1234.\n", encoding="utf-8")
    Path("docs/b.md").write_text("# B\n\n## B1\n\nThe beta code is 5678.\n\n## B2\n\nMore.\n", encoding="utf-8")
    run(cli, "build", "docs", "--tree", "md", "--structure", "headings", "--db", "kb.db", "-q", *KW)
    round_trip(cli, "md")
    with KnowTree("fresh.db", create=False) as kt:
        assert {d.path for d in kt.store.documents("back")} == {"docs/a.md", "docs/b.md"}
        assert "The beta code is 5678." in kt.store.documents("back")[1].text
    Path("fresh.db").unlink()
    run(cli, "build", "docs", "--tree", "chunks", "--db", "kb.db", "-q", *KW)
    round_trip(cli, "chunks")


def chat_rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "user" if i % 3 != 1 else "assistant",
            "name": "Ann" if i % 3 != 1 else None,
            "content": f"Message {i}: {'I moved to Lisbon' if i < n // 2 else 'the cat Tom is ill'}.  Two  spaces\n kept.",
            "timestamp": f"2024-03-0{1 + i // 20}T10:{i % 60:02d}",
            "session": str(1 + i // 20),
            "id": f"m{i}",
        }
        for i in range(n)
    ]


def test_chatindex_round_trip_keeps_messages_verbatim_and_the_topic_tree(cli: CliRunner) -> None:
    Path("chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chat_rows(40)), encoding="utf-8")
    run(cli, "chat", "add", "m", "chat.jsonl", "--db", "kb.db", "--batch", "4", *KW)
    run(cli, "chat", "rm", "m", "--message", "7", "--db", "kb.db", *KW)  # a gap in the positions
    exported = run(cli, "export", "m", "--db", "kb.db", "--format", "chatindex")
    Path("m.json").write_text(exported, encoding="utf-8")
    out = run(cli, "import", "m.json", "--tree", "m2", "--db", "fresh.db")
    assert "39 messages" in out
    with KnowTree("kb.db", create=False) as kt:
        before = kt.store.load_messages("m")
    with KnowTree("fresh.db", create=False) as kt:
        after = kt.store.load_messages("m2")
        assert kt.store.tree_info("m2").kind == "conversation"
    strip = lambda rows: [{k: v for k, v in r.items() if k != "node_id"} for r in rows]  # noqa: E731
    assert strip(after) == strip(before) and len(after) == 39
    # the same topic tree: exported again, it is the same JSON
    assert json.loads(run(cli, "export", "m2", "--db", "fresh.db", "--format", "chatindex")) == json.loads(exported)
    # the memory goes on: an add continues it, positions after the last one
    Path("more.jsonl").write_text(json.dumps({"role": "user", "content": "One more."}) + "\n", encoding="utf-8")
    run(cli, "chat", "add", "m2", "more.jsonl", "--db", "fresh.db", *KW)
    with KnowTree("fresh.db", create=False) as kt:
        last = kt.store.load_messages("m2")[-1]
    assert last["position"] == 41 and last["content"] == "One more."
    refused = run(cli, "import", "m.json", "--tree", "m2", "--db", "fresh.db", code=1)
    assert "already exists" in refused and "--replace" in refused


def test_a_plain_chatindex_file_imports(cli: CliRunner) -> None:
    data = {
        "max_children": 4,
        "tree": {
            "type": "topic",
            "topic_name": "ROOT",
            "children": [
                {
                    "type": "topic",
                    "topic_name": "Trip",
                    "summary": "Planning a trip to Porto.",
                    "children": [
                        {"type": "message", "message_index": 0, "user": "Shall we go to Porto?", "assistant": "Yes, in May."},
                        {"type": "topic", "topic_name": "Hotel", "children": [{"type": "message", "message_index": 1, "user": "Which hotel?"}]},
                    ],
                },
                {"type": "message", "message_index": 2, "system": "A note.", "assistant": "Noted."},
            ],
        },
    }
    Path("c.json").write_text(json.dumps(data), encoding="utf-8")
    run(cli, "import", "c.json", "--tree", "trip", "--db", "kb.db")
    with KnowTree("kb.db", create=False) as kt:
        rows = kt.store.load_messages("trip")
        tree = kt.tree("trip")
        titles = sorted(n.meta.title for n in tree.nodes.values() if not n.is_leaf)
    assert [(r["position"], r["role"], r["content"]) for r in rows] == [
        (1, "user", "Shall we go to Porto?"),
        (2, "assistant", "Yes, in May."),
        (3, "user", "Which hotel?"),
        (4, "system", "A note."),
        (5, "assistant", "Noted."),
    ]
    assert titles == ["Hotel", "Trip", "trip"]
    Path("bad.json").write_text(json.dumps({"tree": {"type": "topic", "children": [{"type": "message"}]}}), encoding="utf-8")
    err = run(cli, "import", "bad.json", "--tree", "bad", "--db", "kb.db", code=1)
    assert "bad.json" in err and "child 1" in err
