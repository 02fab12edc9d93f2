"""Issue 13, part A: nothing a user stored is replaced or removed unless asked (items 1-4, 12).

Every test drives the CLI through typer's runner with the keyword model; each reproduces a path that
lost data (or misreported what it did) before the fix.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import invoke as run
from knowtree.core import KnowTree


def show(cli: CliRunner, tree: str, db: str = "kb.db") -> dict:
    return json.loads(run(cli, "show", tree, "--db", db, "--json"))


def doc_paths(cli: CliRunner, tree: str, db: str = "kb.db") -> set[str]:
    return {s["file"] for n in show(cli, tree, db)["nodes"] for s in n["spans"]}


def chat_file(path: Path, n: int = 12) -> str:
    rows = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "name": "Ann" if i % 2 == 0 else None,
            "content": f"Message {i}: I moved to Lisbon and adopted a cat named Tom.",
            "timestamp": f"2024-03-01T10:{i:02d}",
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    out = {}
    for name, text in {
        "docs/a.md": "# A\nAlpha facts: the alpha code is 1234.\n",
        "docs/b.md": "# B\nBeta facts: the beta code is 5678.\n",
        "x/notes.md": "Notes one: the harbour opens at dawn.\n",
        "y/notes.md": "Notes two: the bakery closes at noon.\n",
    }.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        out[name] = name
    return out


KW = ("--model", "keyword", "-q")


# -- item 1: a build or an import onto another tree is refused unless --replace ----------------------
def test_build_onto_a_memory_is_refused_and_the_memory_kept(cli: CliRunner, tmp_path: Path, files) -> None:
    chat = chat_file(tmp_path / "chat.jsonl")
    run(cli, "chat", "add", "notes", chat, "--db", "kb.db", *KW)
    err = run(cli, "build", "docs/a.md", "--tree", "notes", "--db", "kb.db", *KW, code=1)
    assert len(err.strip().splitlines()) == 1 and "conversation memory" in err and "--replace" in err
    assert "Lisbon" in json.dumps(show(cli, "notes"))
    run(cli, "build", "docs/a.md", "--tree", "notes", "--db", "kb.db", "--replace", *KW)
    assert show(cli, "notes")["tree"]["kind"] == "document"


def test_rebuild_without_some_documents_is_refused_but_the_same_rebuild_is_free(
    cli: CliRunner, files
) -> None:
    run(cli, "build", "docs/a.md", "docs/b.md", "--tree", "t", "--db", "kb.db", *KW)
    again = run(cli, "build", "docs/a.md", "docs/b.md", "--tree", "t", "--db", "kb.db", *KW)
    assert again.strip().endswith(" 0 LLM calls")  # the incremental rebuild still works
    err = run(cli, "build", "docs/a.md", "--tree", "t", "--db", "kb.db", *KW, code=1)
    assert "docs/b.md" in err and "--add" in err and "--replace" in err
    assert doc_paths(cli, "t") == {"docs/a.md", "docs/b.md"}
    run(cli, "build", "docs/a.md", "--tree", "t", "--db", "kb.db", "--replace", *KW)
    assert doc_paths(cli, "t") == {"docs/a.md"}


def test_import_onto_an_existing_tree_is_refused_unless_replace(cli: CliRunner, files) -> None:
    run(cli, "build", "docs/a.md", "--tree", "t", "--db", "kb.db", *KW)
    exported = run(cli, "export", "t", "--db", "kb.db")
    Path("t.json").write_text(exported, encoding="utf-8")
    run(cli, "build", "docs/b.md", "--tree", "u", "--db", "kb.db", *KW)
    err = run(cli, "import", "t.json", "--tree", "u", "--db", "kb.db", code=1)
    assert "'u' already exists" in err and "--replace" in err
    assert doc_paths(cli, "u") == {"docs/b.md"}
    run(cli, "import", "t.json", "--tree", "u", "--db", "kb.db", "--replace")
    assert "docs/b.md" not in doc_paths(cli, "u")


# -- item 2: rm --doc removes exactly one named document ------------------------------------------------
def test_rm_doc_with_an_ambiguous_name_lists_the_candidates(cli: CliRunner, files) -> None:
    run(cli, "build", "x/notes.md", "y/notes.md", "--tree", "r", "--db", "kb.db", *KW)
    err = run(cli, "rm", "r", "--doc", "notes.md", "--db", "kb.db", code=1)
    assert "matches 2 documents" in err and "x/notes.md" in err and "y/notes.md" in err
    assert doc_paths(cli, "r") == {"x/notes.md", "y/notes.md"}
    out = run(cli, "rm", "r", "--doc", "y/notes.md", "--db", "kb.db")
    assert "removed 'y/notes.md'" in out and "1 document(s) left" in out
    assert doc_paths(cli, "r") == {"x/notes.md"}


def test_rm_doc_suffix_must_end_at_a_folder_boundary(cli: CliRunner, files) -> None:
    run(cli, "build", "docs/a.md", "docs/b.md", "--tree", "r", "--db", "kb.db", *KW)
    run(cli, "rm", "r", "--doc", ".md", "--db", "kb.db", code=1)  # not a suffix of two names
    run(cli, "rm", "r", "--doc", "s/a.md", "--db", "kb.db", code=1)  # 'docs/a.md' is not '.../s/a.md'
    assert "removed 'docs/a.md'" in run(cli, "rm", "r", "--doc", "a.md", "--db", "kb.db")


# -- item 3: --add keeps the documents of a plain chunk tree --------------------------------------------
def test_add_to_a_chunk_tree_keeps_its_documents(cli: CliRunner, files) -> None:
    run(cli, "build", "docs/a.md", "--tree", "t", "--db", "kb.db", *KW)
    run(cli, "build", "docs/b.md", "--tree", "t", "--add", "--db", "kb.db", *KW)
    assert doc_paths(cli, "t") == {"docs/a.md", "docs/b.md"}
    assert show(cli, "t")["tree"]["documents"] == 2


# -- item 4: rm --doc rebuilds with the tree's own model, never the default silently ------------------
def test_rm_doc_on_a_chunk_tree_uses_the_tree_model(cli: CliRunner, files) -> None:
    # the default model (`local`) would be loaded here, which the test setup forbids
    run(cli, "build", "docs/a.md", "docs/b.md", "--tree", "t", "--db", "kb.db", *KW)
    out = run(cli, "rm", "t", "--doc", "docs/b.md", "--db", "kb.db")
    assert "removed 'docs/b.md'" in out and "rebuilt with" not in out
    assert show(cli, "t")["tree"]["model"] == "keyword"


@pytest.mark.sqlite_only
def test_rm_doc_on_an_older_tree_maps_its_model_id(cli: CliRunner, files) -> None:
    run(cli, "build", "docs/a.md", "docs/b.md", "--tree", "t", "--db", "kb.db", *KW)
    with sqlite3.connect("kb.db") as c:  # a tree from before model strings were recorded
        c.execute("UPDATE trees SET settings_json = json_remove(settings_json, '$.model_spec')")
    run(cli, "rm", "t", "--doc", "docs/a.md", "--db", "kb.db")
    assert show(cli, "t")["tree"]["model"] == "keyword"


def test_rm_doc_with_another_model_says_so(cli: CliRunner, files) -> None:
    run(cli, "build", "docs/a.md", "docs/b.md", "--tree", "t", "--db", "kb.db", *KW)
    out = run(cli, "rm", "t", "--doc", "docs/a.md", "--db", "kb.db", "--model", "slow:0")
    assert "rebuilt with keyword-slow (it was built with keyword)" in out


# -- item 12: nothing new, --max-children, ChatIndex export, --version ----------------------------------
def test_chat_add_of_the_same_file_says_nothing_new(cli: CliRunner, tmp_path: Path) -> None:
    chat = chat_file(tmp_path / "chat.jsonl")
    run(cli, "chat", "add", "m", chat, "--db", "kb.db", *KW)
    out = run(cli, "chat", "add", "m", chat, "--db", "kb.db", *KW)
    assert out.startswith("nothing new") and "12 messages" in out


def test_build_max_children(cli: CliRunner, tmp_path: Path) -> None:
    text = "\n\n".join(
        f"Paragraph {i} about the harbour and its keeper number {i} at dawn." * 3 for i in range(12)
    )
    Path("long.md").write_text(text, encoding="utf-8")
    run(
        cli,
        "build",
        "long.md",
        "--tree",
        "t",
        "--db",
        "kb.db",
        "--chunk-size",
        "200",
        "--max-children",
        "3",
        *KW,
    )
    nodes = show(cli, "t")["nodes"]
    assert max(len(n["children"]) for n in nodes) == 3


def test_export_chatindex(cli: CliRunner, tmp_path: Path) -> None:
    chat = chat_file(tmp_path / "chat.jsonl", n=30)
    run(cli, "chat", "add", "m", chat, "--db", "kb.db", *KW)
    data = json.loads(run(cli, "export", "m", "--db", "kb.db", "--format", "chatindex"))
    assert data["total_messages"] == 30 and data["max_children"] >= 2
    root = data["tree"]
    assert root["type"] == "topic" and root["topic_name"] == "ROOT"
    assert (root["start_index"], root["end_index"]) == (0, 30)

    def messages(node: dict) -> list[dict]:
        if node["type"] == "message":
            return [node]
        assert {"topic_name", "summary", "start_index", "end_index", "sub_node_count", "children"} <= set(
            node
        )
        assert node["sub_node_count"] == len(node["children"])
        return [m for c in node["children"] for m in messages(c)]

    found = messages(root)
    assert [m["message_index"] for m in found] == list(range(0, 30, 2))  # user + assistant exchanges
    assert all("user" in m and "assistant" in m for m in found)
    err = run(cli, "export", "m", "--db", "kb.db", "--format", "nope", code=1)
    assert "chatindex" in err


def test_version(cli: CliRunner) -> None:
    out = run(cli, "--version")
    assert out.startswith("knowtree ") and out.strip().split()[-1][0].isdigit()


def test_python_api_build_onto_a_memory_is_refused(tmp_path: Path) -> None:
    from knowtree.errors import UserError
    from knowtree.testing.models import KeywordModel

    chat = chat_file(tmp_path / "chat.jsonl")
    (tmp_path / "a.md").write_text("Alpha facts.\n", encoding="utf-8")
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        kt.memory("m").add_file(chat)
        with pytest.raises(UserError, match="conversation memory"):
            kt.build([str(tmp_path / "a.md")], tree="m")
        assert len(kt.memory("m").messages()) == 12


def test_adding_a_pdf_to_a_chunk_tree_keeps_its_documents(cli: CliRunner, files, tmp_path: Path) -> None:
    from pdf_maker import filler, make_pdf

    pdf = make_pdf(tmp_path / "report.pdf", [["Chapter 1 Revenue", *filler("revenue", 5)]])
    run(cli, "build", "docs/a.md", "docs/b.md", "--tree", "t", "--db", "kb.db", *KW)
    run(cli, "build", str(pdf), "--tree", "t", "--add", "--db", "kb.db", "--meta", "company=Acme", *KW)
    assert doc_paths(cli, "t") == {"docs/a.md", "docs/b.md", str(pdf)}
    with KnowTree("kb.db", model="keyword") as kt:
        from knowtree.store.docinfo import doc_infos

        metas = {i.path: i.meta.get("company") for i in doc_infos(kt.store, "t")}
    assert metas == {"docs/a.md": None, "docs/b.md": None, str(pdf): "Acme"}
