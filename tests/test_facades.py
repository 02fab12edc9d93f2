"""The facades and the router (issue 9): one table decides how a question runs; the same `mode`
vocabulary on trees and memories; streaming keeps the ask options; missing names fail the same way;
run bookkeeping closes on failure; settings without the environment; answer/ never sees the store."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import write_corpus
from knowtree.answer.router import MODES, Plan, route
from knowtree.cli.app import app
from knowtree.config import Settings
from knowtree.core import KnowTree
from knowtree.errors import ConfigError, NotFoundError
from knowtree.testing.models import KeywordModel

CHAT = [
    {
        "role": "user",
        "name": "Ann",
        "content": f"Note {i} about the garden plans.",
        "timestamp": "10:00 am on 1 May, 2023",
    }
    for i in range(8)
] + [
    {
        "role": "user",
        "name": "Ann",
        "content": "My sister Beth moved to Lisbon.",
        "timestamp": "10:05 am on 1 May, 2023",
    }
]


# -- the router: one table ---------------------------------------------------------------------------


def test_router_table() -> None:
    assert set(MODES) == {"auto", "walk", "search", "retrieve", "nav"}
    doc, conv = "document", "conversation"
    assert route(doc, None) == Plan("retrieve", "retrieve")  # a chunk tree: its index, one answer call
    assert route(doc, "auto") == Plan("retrieve", "retrieve")
    assert route(doc, "walk") == Plan("walk", "walk")
    assert route(doc, None, structured=True) == Plan("structured", "auto")
    assert route(doc, "search") == Plan("structured", "search")
    assert route(doc, None, default_mode="walk", structured=lambda: True) == Plan("structured", "walk")
    assert route(doc, "nav", strategy="metadata") == Plan("nav", "nav", strategy="metadata")
    assert route(doc, "retrieve").route == "retrieve"
    # a memory as an index: the index's messages, read by the memory answer step
    assert route(conv, "retrieve") == Plan("memory", "retrieve", navigator="index")
    assert route(conv, None, default_mode="retrieve") == Plan("memory", "retrieve", navigator="index")
    assert route(conv, None) == Plan("memory", "auto", navigator="index")  # auto: the index, too
    assert route(conv, "auto", navigator="tree") == Plan("memory", "auto", navigator="tree")
    assert route(doc, None, default_mode="nav").route == "nav"
    # nav on a memory: the index's ranking judged, then the memory answer step
    assert route(conv, None, default_mode="nav") == Plan("memory", "nav", navigator="index")
    assert route(conv, "nav") == Plan("memory", "nav", navigator="index")
    assert route(conv, "walk") == Plan("memory", "walk", navigator="tree")
    assert route(conv, None, navigator="agent") == Plan("memory", "auto", navigator="agent")
    # naming a navigator asks for the mode that uses it, whatever the ask_mode setting
    assert route(conv, None, default_mode="retrieve", navigator="tree") == Plan("memory", "auto")


def test_router_never_loads_the_structure_of_a_memory() -> None:
    def boom() -> bool:
        raise AssertionError("structure asked for a memory")

    assert route("conversation", None, structured=boom).route == "memory"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "document", "mode": "tree"},
        {"kind": "document", "mode": None, "strategy": "bogus"},
        {"kind": "document", "mode": None, "navigator": "agent"},  # the agent answers memories
        {"kind": "conversation", "mode": "retrieve", "navigator": "agent"},
        {"kind": "conversation", "mode": None, "navigator": "robot"},
    ],
)
def test_router_refuses_what_it_cannot_run(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        route(**kwargs)


def test_ask_mode_setting_accepts_every_cli_mode(tmp_path: Path) -> None:
    for mode in ("retrieve", "nav"):
        assert Settings.load({"ask_mode": mode}).ask_mode == mode
    write_corpus(tmp_path / "docs")
    with KnowTree(tmp_path / "kb.db", model=KeywordModel(), ask_mode="retrieve") as kt:
        kt.build([str(tmp_path / "docs")], tree="docs")
        answer = kt.tree("docs").ask("Who approved the budget?")
    assert answer.trace[0].outcome.startswith("retrieve:")


# -- memories: the same mode vocabulary as trees; budgets kept ----------------------------------------


def test_memory_ask_takes_the_tree_modes_and_a_navigator(tmp_path: Path) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        mem = kt.memory("chat")
        mem.embedder = "hash"
        mem.add(CHAT)
        by_index = mem.ask("Where did Beth move?", mode="retrieve", budget_tokens=60)
        walked = mem.ask("Where did Beth move?", mode="walk")
        agent = mem.ask("Where did Beth move?", navigator="agent")
        old = mem.ask("Where did Beth move?", mode="agent")  # the old spelling names the navigator
    assert by_index.trace[0].outcome.startswith("retrieve:") and "Lisbon" in (by_index.answer or "")
    assert "Lisbon" in (walked.answer or "") and not walked.trace[0].outcome.startswith("retrieve:")
    assert agent.status == old.status


def test_tree_ask_on_a_memory_keeps_the_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import knowtree.memory as memory_module

    seen: list[int] = []
    real = memory_module.MemoryNavigator

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["options"].budget_tokens)
        return real(*args, **kwargs)

    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        kt.memory("chat").add(CHAT)
        monkeypatch.setattr(memory_module, "MemoryNavigator", spy)
        kt.tree("chat").ask("Where did Beth move?", budget_tokens=123)
    assert seen == [123]


# -- missing names ------------------------------------------------------------------------------------


def test_missing_names_fail_the_same_way(tmp_path: Path) -> None:
    write_corpus(tmp_path / "docs")
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        kt.build([str(tmp_path / "docs")], tree="docs")
        with pytest.raises(NotFoundError, match="no tree named 'nope'"):
            kt.tree("nope")
        with pytest.raises(NotFoundError, match="not a conversation memory"):
            kt.memory("docs")  # another kind of tree is no memory
        new = kt.memory("nope")  # a memory is created by its first add...
        for read in (new.messages, lambda: new.ask("anything?"), lambda: new.context("anything?")):
            with pytest.raises(NotFoundError, match="no tree named 'nope'"):  # ...and not read before
                read()
        assert kt.memory("nope").add(CHAT[:2]).added == 2
        assert len(kt.memory("nope").messages()) == 2


# -- runs close on failure ----------------------------------------------------------------------------


def test_a_failing_memory_context_closes_its_run_as_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from knowtree.answer.memory import MemoryNavigator

    def fail(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("retrieval broke")

    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        kt.memory("chat").add(CHAT)
        monkeypatch.setattr(MemoryNavigator, "retrieve", fail)
        with pytest.raises(RuntimeError, match="retrieval broke"):
            kt.memory("chat").context("Where did Beth move?", use_model=True)
        run = kt.store.runs("chat", limit=1)[0]
    assert run["kind"] == "context" and run["status"] == "failed" and run["finished"]


# -- the command line: --stream keeps --mode / --budget --------------------------------------------------


def test_ask_stream_keeps_mode_and_budget(tmp_path: Path) -> None:
    write_corpus(tmp_path / "docs")
    cli = CliRunner()
    db = str(tmp_path / "kb.db")
    r = cli.invoke(
        app, ["build", str(tmp_path / "docs"), "--db", db, "--model", "keyword", "--tree", "docs", "-q"]
    )
    assert r.exit_code == 0, r.output
    r = cli.invoke(
        app,
        ["ask", "docs", "Who approved the budget?", "--db", db, "--model", "keyword", "--stream", "--json",
         "--mode", "retrieve", "--budget", "300"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    events = [json.loads(line) for line in r.output.splitlines() if line.strip()]
    assert events[0]["event"] == "step" and events[0]["step"]["outcome"].startswith("retrieve:")
    assert events[-1]["event"] == "answer"
    assert events[-1]["answer"]["trace"][0]["outcome"].startswith("retrieve:")

    chat = tmp_path / "chat.jsonl"
    chat.write_text("\n".join(json.dumps(m) for m in CHAT) + "\n", encoding="utf-8")
    assert (
        cli.invoke(app, ["chat", "add", "conv", str(chat), "--db", db, "--model", "keyword", "-q"]).exit_code
        == 0
    )
    r = cli.invoke(
        app,
        ["ask", "conv", "Where did Beth move?", "--db", db, "--model", "keyword", "--stream", "--json",
         "--mode", "retrieve"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    events = [json.loads(line) for line in r.output.splitlines() if line.strip()]
    assert events[0]["step"]["outcome"].startswith("retrieve:") and events[-1]["event"] == "answer"


# -- settings without the environment ---------------------------------------------------------------


def test_reading_env_and_config_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "knowtree.toml").write_text("chunk_size = 700\n", encoding="utf-8")
    monkeypatch.setenv("KNOWTREE_MAX_CHILDREN", "5")
    assert (Settings.load().chunk_size, Settings.load().max_children) == (700, 5)
    plain = Settings.load(read_env=False)
    assert (plain.chunk_size, plain.max_children) == (5000, 8)
    assert Settings.load({"chunk_size": 900}, read_env=False).chunk_size == 900
    with KnowTree(tmp_path / "kb.db", model=KeywordModel(), read_env=False) as kt:
        assert (kt.settings.chunk_size, kt.settings.max_children) == (5000, 8)
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        assert (kt.settings.chunk_size, kt.settings.max_children) == (700, 5)


# -- layers: answer/ gets nodes, a client and retrieval results -----------------------------------------


def test_routing_modules_never_import_the_facades_or_the_store() -> None:
    import knowtree.answer

    forbidden = ("knowtree.core", "knowtree.tree", "knowtree.memory", "knowtree.kb", "knowtree.store",
                 "knowtree.construct", "knowtree.cli", "knowtree.server")  # fmt: skip
    bad = []
    for name in ("router", "modes", "indexed", "nav"):
        path = Path(knowtree.answer.__file__).parent / f"{name}.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            bad += [
                f"{name}: {n}"
                for n in names
                if n in forbidden or n.startswith(tuple(f + "." for f in forbidden))
            ]
    assert bad == []
