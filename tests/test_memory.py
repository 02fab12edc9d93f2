"""Conversation memories: importers, the incremental topic tree, retrieval, agent, streaming, CLI."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from knowtree.cli.app import app
from knowtree.core import KnowTree
from knowtree.errors import InputError
from knowtree.ingest.chat import load_chat, parse_timestamp
from knowtree.llm.base import Completion, Request
from knowtree.testing.models import FunctionModel, KeywordModel, keyword_except

TOPICS = ["garden", "marathon", "guitar", "paris", "puppy", "novel"]


def exchange(i: int, topic: str | None = None, day: int = 1) -> list[dict[str, Any]]:
    topic = topic or TOPICS[(i // 6) % len(TOPICS)]
    stamp = f"10:{i % 60:02d} am on {day} May, 2023"
    return [
        {
            "role": "user",
            "name": "Ann",
            "content": f"Message {i} about my {topic} plans number {i}.",
            "timestamp": stamp,
        },
        {"role": "assistant", "content": f"Reply {i}: tell me more about the {topic}.", "timestamp": stamp},
    ]


class Counting(KeywordModel):
    """The keyword model, counting the requests it answers by purpose."""

    def __init__(self) -> None:
        super().__init__()
        self.by_purpose: dict[str, int] = {}

    def complete(self, request: Request) -> Completion:
        self.by_purpose[request.schema_name] = self.by_purpose.get(request.schema_name, 0) + 1
        return super().complete(request)


@pytest.fixture()
def kt(tmp_path: Path) -> KnowTree:
    k = KnowTree(tmp_path / "kb.db", model=KeywordModel())
    yield k
    k.close()


def _mem(kt: KnowTree, name: str = "chat") -> Any:
    m = kt.memory(name)
    m.embedder = "hash"
    return m


# -- importers ------------------------------------------------------------------------------------
def test_locomo_dates_and_other_timestamps_parse() -> None:
    assert parse_timestamp("1:56 pm on 8 May, 2023").isoformat() == "2023-05-08T13:56:00"
    assert parse_timestamp("12:05 am on 1 Jan, 2024").isoformat() == "2024-01-01T00:05:00"
    assert parse_timestamp("2023-05-08T13:56:00Z").isoformat() == "2023-05-08T13:56:00"
    assert parse_timestamp(1683554160).isoformat() == "2023-05-08T13:56:00"
    assert parse_timestamp("May 8, 2023").isoformat() == "2023-05-08T00:00:00"
    for bad in ("yesterday", "31 Feb 2023", "13:00 pm on 8 May, 2023", ""):
        with pytest.raises(ValueError):
            parse_timestamp(bad)


def test_jsonl_openai_export_and_locomo_import(tmp_path: Path) -> None:
    p = tmp_path / "chat.jsonl"
    p.write_text("\n".join(json.dumps(m) for m in exchange(0) + exchange(1)) + "\n")
    msgs = load_chat(p)
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert msgs[0].name == "Ann" and msgs[0].time == "2023-05-01T10:00:00"

    export = [
        {
            "title": "Trip",
            "create_time": 1683554160,
            "current_node": "c",
            "mapping": {
                "a": {"message": None, "parent": None, "children": ["b"]},
                "b": {
                    "message": {
                        "author": {"role": "user"},
                        "content": {"parts": ["Book Paris"]},
                        "create_time": 1683554160,
                    },
                    "parent": "a",
                    "children": ["c"],
                },
                "c": {
                    "message": {
                        "author": {"role": "assistant"},
                        "content": {"parts": ["Done"]},
                        "create_time": 1683554170,
                    },
                    "parent": "b",
                    "children": [],
                },
            },
        }
    ]
    e = tmp_path / "conversations.json"
    e.write_text(json.dumps(export))
    msgs = load_chat(e)
    assert [(m.role, m.content, m.session) for m in msgs] == [
        ("user", "Book Paris", "Trip"),
        ("assistant", "Done", "Trip"),
    ]

    locomo = [
        {
            "sample_id": "x",
            "qa": [],
            "conversation": {
                "speaker_a": "A",
                "speaker_b": "B",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "A", "dia_id": "D1:1", "text": "Hi"},
                    {"speaker": "B", "dia_id": "D1:2", "text": "Look", "blip_caption": "a photo of a dog"},
                ],
            },
        }
    ]
    lp = tmp_path / "locomo.json"
    lp.write_text(json.dumps(locomo))
    msgs = load_chat(lp)
    assert msgs[1].id == "D1:2" and msgs[1].attachment == "a photo of a dog" and msgs[1].session == "1"
    assert "[shares a photo of a dog]" in msgs[1].display()


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"role": "user", "content": "hi"}\n{"content": "no role"}\n', "line 2: missing 'role'"),
        ('{"role": "user", "content": "hi", "timestamp": "someday"}\n', "line 1: bad timestamp"),
        ('{"role": "robot", "content": "hi"}\n', "line 1: unknown role 'robot'"),
        ('{"role": "user", "content": "hi"}\nnot json\n', "line 2: not valid JSON"),
        ('"just a string"', "not a chat file"),
        ('{"messages": 3}', "expected a JSON list of messages"),
    ],
)
def test_malformed_imports_name_the_record_and_store_nothing(
    kt: KnowTree, tmp_path: Path, content: str, needle: str
) -> None:
    mem = _mem(kt)
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps(m) for m in exchange(0)) + "\n")
    mem.add_file(good)
    before = mem.messages()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    with pytest.raises(InputError) as err:
        mem.add_file(bad)
    assert needle in str(err.value) and "bad.jsonl" in str(err.value)
    assert mem.messages() == before  # nothing stored was lost or added


# -- the incremental tree -------------------------------------------------------------------------
def _leaf_order(kt: KnowTree, name: str) -> list[int]:
    t = kt.tree(name)
    out: list[int] = []

    def visit(nid: str) -> None:
        n = t.nodes[nid]
        if n.is_leaf:
            out.append(n.spans[0].line_start)
        for c in n.children:
            visit(c)

    visit(t.root.id)
    return out


def test_tree_keeps_time_order_messages_verbatim_and_splits_big_nodes(kt: KnowTree) -> None:
    mem = _mem(kt)
    msgs = [m for i in range(60) for m in exchange(i, day=1 + i // 20)]
    report = mem.add(msgs)
    assert report.messages == 120
    assert _leaf_order(kt, "chat") == list(range(1, 121))  # depth-first order is time order
    t = kt.tree("chat")
    assert t.info.kind == "conversation"
    assert max(len(n.children) for n in t.nodes.values()) <= kt.settings.max_children
    sessions = t.root.children
    assert any(
        "1 May 2023" in t.nodes[s].meta.title
        for s in t.nodes
        if t.nodes[s].meta.content_types == ["Conversation session"]
    )
    assert len(sessions) >= 1
    stored = mem.messages(3, 3)[0]
    assert stored["content"] == msgs[2]["content"] and stored["name"] == "Ann" and stored["position"] == 3


def test_adding_one_exchange_to_500_messages_costs_at_most_depth_plus_2_calls(tmp_path: Path) -> None:
    model = Counting()
    with KnowTree(tmp_path / "kb.db", model=model) as kt:
        mem = _mem(kt)
        mem.add([m for i in range(250) for m in exchange(i, day=1 + i // 50)])
        assert len(mem.messages()) == 500
        depth = kt.tree("chat").info.depth
        before = len(model.requests)
        report = mem.add(exchange(250, day=5))
        calls = len(model.requests) - before
        assert report.usage.calls == calls
        print(f"one exchange on 500 messages: {calls} calls, depth {depth}, {model.by_purpose}")
        assert 1 <= calls <= depth + 2, (calls, depth, model.by_purpose)
        # no rebuild: the other nodes are untouched, the new messages are leaves at the end
        assert _leaf_order(kt, "chat")[-2:] == [501, 502]


def test_interrupted_add_resumes_from_the_cache(tmp_path: Path) -> None:
    p = tmp_path / "chat.jsonl"
    p.write_text("\n".join(json.dumps(m) for i in range(40) for m in exchange(i)) + "\n")
    calls = {"n": 0}
    keyword = KeywordModel()

    def flaky(request: Request) -> Any:
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt  # killed mid-way
        return keyword.fn(request)

    with KnowTree(tmp_path / "kb.db", model=FunctionModel(flaky, id="keyword")) as kt:
        with pytest.raises(KeyboardInterrupt):
            _mem(kt).add_file(p)
        stored = len(_mem(kt).messages())
        assert 0 < stored < 80
    with KnowTree(tmp_path / "kb.db", model=FunctionModel(keyword.fn, id="keyword")) as kt:
        report = _mem(kt).add_file(p)
        assert report.skipped == stored and report.messages == 80
        assert _leaf_order(kt, "chat") == list(range(1, 81))
        again = _mem(kt).add_file(p)  # nothing new: a report, not an error
        assert (again.added, again.skipped, again.messages) == (0, 80, 80)


# -- answering ------------------------------------------------------------------------------------
def _chat(kt: KnowTree) -> Any:
    mem = _mem(kt)
    mem.add([m for i in range(30) for m in exchange(i, day=1 + i // 10)])
    mem.add(
        [
            {
                "role": "user",
                "name": "Ann",
                "content": "My sister Beth moved to Lisbon for her job.",
                "timestamp": "9 May 2023",
            },
            {"role": "assistant", "content": "Lisbon is lovely.", "timestamp": "9 May 2023"},
        ]
    )
    return mem


def test_ask_cites_messages_with_position_speaker_and_time(kt: KnowTree) -> None:
    mem = _chat(kt)
    answer = mem.ask("Where did Ann's sister Beth move for her job?")
    assert answer.status == "complete"
    assert "Lisbon" in (answer.answer or "")
    c = answer.citations[0]
    assert c.line_start == 61 and c.speaker == "Ann" and c.timestamp == "9 May 2023"
    assert [s.action for s in answer.trace][-1] == "read"
    # the same through Tree.ask (the CLI's path)
    assert kt.tree("chat").ask("Where did Ann's sister Beth move for her job?").citations[0].line_start == 61


@pytest.mark.parametrize("mode", ["walk", "retrieve"])  # the navigator and the index: one answer step
def test_later_message_wins_and_the_answer_says_so(tmp_path: Path, mode: str) -> None:
    reply = {"found": True, "answer": "Berlin", "messages": [4], "superseded": [2]}
    with KnowTree(tmp_path / "kb.db", model=keyword_except({"memory_answer": reply}, id="m")) as kt:
        mem = _mem(kt)
        mem.add(
            [
                {"role": "user", "name": "Ann", "content": "Where do you live now?", "timestamp": "1 May 2023"},
                {"role": "user", "name": "Bo", "content": "I live in Paris.", "timestamp": "1 May 2023"},
                {"role": "user", "name": "Ann", "content": "Still there?", "timestamp": "9 June 2023"},
                {"role": "user", "name": "Bo", "content": "No, I live in Berlin now.", "timestamp": "9 June 2023"},
            ]
        )
        answer = mem.ask("Where does Bo live?", mode=mode)
    assert answer.answer.startswith("Berlin")
    assert "later message 4 (9 June 2023)" in answer.answer and "message 2 (1 May 2023)" in answer.answer
    assert answer.parts[0]["superseded"] == [2]


def test_an_answer_citing_no_shown_message_is_partial(tmp_path: Path) -> None:
    reply = {"found": True, "answer": "Tokyo", "messages": [999], "superseded": []}
    with KnowTree(tmp_path / "kb.db", model=keyword_except({"memory_answer": reply}, id="m")) as kt:
        mem = _mem(kt)
        mem.add(exchange(0) + exchange(1))
        answer = mem.ask("Where?")
    assert answer.status == "partial" and "unverified" in (answer.answer or "")
    assert any(s.error for s in answer.trace)


def test_context_returns_raw_messages_within_the_budget(kt: KnowTree) -> None:
    mem = _chat(kt)
    ctx = mem.context("Where did Beth move?", budget_tokens=60, use_model=True)  # the walk's messages
    assert ctx and sum(len(str(m["name"] or m["role"]) + str(m["content"])) // 4 for m in ctx) <= 80
    assert [m["position"] for m in ctx] == sorted(m["position"] for m in ctx)
    assert any("Lisbon" in str(m["content"]) for m in ctx)
    assert all("timestamp" in m for m in ctx)
    indexed = mem.context("Where did Beth move?", budget_tokens=60)  # the default: the index, no model call
    assert any("Lisbon" in str(m["content"]) for m in indexed) and all(m["via"] == "index" for m in indexed)


def test_agent_mode_views_reads_and_cites(kt: KnowTree) -> None:
    mem = _chat(kt)
    answer = mem.ask("Where did Ann's sister Beth move for her job?", mode="agent")
    assert answer.status == "complete" and answer.citations[0].line_start == 61
    assert {"choose", "read"} <= {s.action for s in answer.trace}


def test_agent_stops_at_the_step_limit(tmp_path: Path) -> None:
    with KnowTree(tmp_path / "kb.db", model=FunctionModel(lambda r: _view_forever(r), id="m")) as kt:
        mem = _mem(kt)
        mem.add(exchange(0))
        answer = mem.ask("Anything?", mode="agent", max_steps=3)
    assert answer.status == "none" and answer.answer is None
    assert answer.trace[-1].action == "exhausted" and "3 steps" in answer.trace[-1].outcome


def _view_forever(request: Request) -> Any:
    if request.schema_name == "memory_agent":
        return {"tool": "view", "node": "zzz"}
    return KeywordModel().fn(request)


def test_streaming_yields_a_navigation_event_before_the_answer_is_complete(tmp_path: Path) -> None:
    seen_step = threading.Event()
    answered_after_event: list[bool] = []
    keyword = KeywordModel()

    def model(request: Request) -> Any:
        if request.schema_name == "memory_answer":
            # the answer call waits until the consumer has received a navigation event
            answered_after_event.append(seen_step.wait(timeout=10))
        return keyword.fn(request)

    with KnowTree(tmp_path / "kb.db", model=FunctionModel(model, id="m")) as kt:
        mem = _chat(kt)

        async def consume() -> list[str]:
            kinds = []
            async for event in mem.stream("Where did Ann's sister Beth move for her job?"):
                kinds.append(event["event"])
                if event["event"] == "step":
                    seen_step.set()
            return kinds

        kinds = asyncio.run(consume())
    assert answered_after_event == [True]
    assert kinds[0] == "step" and kinds[-1] == "answer" and "token" in kinds
    assert kinds.index("token") > kinds.index("step")


# -- CLI ------------------------------------------------------------------------------------------
def test_cli_chat_add_show_ask_and_stream(tmp_path: Path) -> None:
    cli = CliRunner()
    db = str(tmp_path / "kb.db")
    p = tmp_path / "chat.jsonl"
    rows = [m for i in range(12) for m in exchange(i, day=8 + i // 6)]
    rows.append(
        {
            "role": "user",
            "name": "Ann",
            "content": "The charity race raised awareness for mental health.",
            "timestamp": "1:56 pm on 9 May, 2023",
        }
    )
    p.write_text("\n".join(json.dumps(m) for m in rows) + "\n")
    r = cli.invoke(app, ["chat", "add", "conv", str(p), "--db", db, "--model", "keyword", "-q"])
    assert r.exit_code == 0, r.output
    assert "added 25 message(s)" in r.output
    r = cli.invoke(app, ["show", "conv", "--db", db])
    assert r.exit_code == 0 and "8 May 2023" in r.output and "The charity race raised awareness" in r.output
    r = cli.invoke(
        app,
        [
            "ask",
            "conv",
            "What did the charity race raise awareness for?",
            "--db",
            db,
            "--model",
            "keyword",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["citations"][0]["line_start"] == 25 and "mental health" in data["answer"]
    r = cli.invoke(
        app,
        [
            "ask",
            "conv",
            "What did the charity race raise awareness for?",
            "--db",
            db,
            "--model",
            "keyword",
            "--stream",
        ],
    )
    assert r.exit_code == 0, r.output
    assert r.output.startswith("» ") and "mental health" in r.output and "citations:" in r.output
    r = cli.invoke(
        app, ["chat", "add", "conv", str(tmp_path / "missing.jsonl"), "--db", db, "--model", "keyword"]
    )
    assert r.exit_code == 1 and "missing.jsonl" in r.output


def test_multi_resolution_stops_at_summaries_and_still_cites_a_message(tmp_path: Path) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        _chat(kt)
    asked: list[str] = []

    def model(request: Request) -> Any:
        asked.append(request.schema_name)
        prompt = request.messages[-1].content
        if request.schema_name == "memory_choose":
            assert "0: the summaries above already answer the question" in prompt
            return {"reason": "the summaries say it", "choice": 0}
        if request.schema_name == "memory_answer":
            assert "These are topic summaries" in prompt
            shown = prompt.split("Messages:\n", 1)[1].split("\n\nQuestion:", 1)[0].splitlines()
            number = int(shown[-1][1:].split("]", 1)[0])  # the latest part, where Lisbon is
            return {"found": True, "answer": "Lisbon", "messages": [number], "superseded": []}
        raise AssertionError(request.schema_name)

    with KnowTree(tmp_path / "kb.db", model=FunctionModel(model, id="m")) as kt:
        answer = _mem(kt).ask("Where did Beth move for her job?", mode="walk")
    assert asked == ["memory_choose", "memory_answer"]  # no messages were read
    assert answer.status == "complete" and answer.parts[0]["resolution"] == "topic summaries"
    c = answer.citations[0]
    assert c.line_start == c.line_end == 61 and c.speaker == "Ann"  # narrowed to the message


class _Streaming(FunctionModel):
    """A model that generates its reply in small pieces (like the embedded model with stream=True)."""

    def complete_streaming(self, request: Request, on_text: Any) -> Completion:
        completion = self.complete(request)
        for i in range(0, len(completion.text), 4):
            on_text(completion.text[i : i + 4])
        return completion


@pytest.mark.parametrize("mode", ["walk", "retrieve"])
def test_answer_tokens_stream_while_the_model_writes_them(tmp_path: Path, mode: str) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        _chat(kt)
    keyword = KeywordModel()
    with KnowTree(tmp_path / "kb.db", model=_Streaming(keyword.fn, id="stream")) as kt:
        mem = _mem(kt)

        async def consume() -> list[dict[str, Any]]:
            return [e async for e in mem.stream("Where did Ann's sister Beth move for her job?", mode=mode)]

        events = asyncio.run(consume())
    tokens = [e["text"] for e in events if e["event"] == "token"]
    # the answer step's own read step (the index's evidence step has no source)
    read_step = next(i for i, e in enumerate(events) if e["event"] == "step" and e["step"].action == "read" and e["step"].source)
    first_token = next(i for i, e in enumerate(events) if e["event"] == "token")
    assert len(tokens) > 3 and first_token < read_step  # during the answer call, not after
    assert "".join(tokens) in events[-1]["answer"].answer and "Lisbon" in "".join(tokens)
    assert events[-1]["answer"].status == "complete"


def test_a_summary_answer_not_grounded_in_the_summaries_descends_to_messages(tmp_path: Path) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        _chat(kt)
    keyword = KeywordModel()
    summary_replies: list[str] = []

    def model(request: Request) -> Any:
        prompt = request.messages[-1].content
        if request.schema_name == "memory_choose" and "0: the summaries" in prompt:
            return {"reason": "the summaries say it", "choice": 0}
        if request.schema_name == "memory_answer" and "These are topic summaries" in prompt:
            summary_replies.append(prompt)
            number = int(prompt.split("Messages:\n[", 1)[1].split("]", 1)[0])
            return {"found": True, "answer": str(number + 198), "messages": [number], "superseded": []}
        return keyword.fn(request)

    with KnowTree(tmp_path / "kb.db", model=FunctionModel(model, id="m")) as kt:
        answer = _mem(kt).ask("Where did Ann's sister Beth move for her job?", mode="walk")
    assert summary_replies  # the summaries were tried first
    assert any(s.error and "not in the cited summaries" in s.error for s in answer.trace)
    assert answer.trace[-1].action == "read" and "Lisbon" in (answer.answer or "")
    assert answer.citations[0].line_start == 61


def test_cli_agent_json_is_a_plain_answer(tmp_path: Path) -> None:
    cli = CliRunner()
    db = str(tmp_path / "kb.db")
    p = tmp_path / "chat.jsonl"
    rows = [m for i in range(4) for m in exchange(i)]
    rows.append(
        {
            "role": "user",
            "name": "Ann",
            "content": "My sister Beth moved to Lisbon.",
            "timestamp": "9 May 2023",
        }
    )
    p.write_text("\n".join(json.dumps(m) for m in rows) + "\n")
    assert (
        cli.invoke(app, ["chat", "add", "c", str(p), "--db", db, "--model", "keyword", "-q"]).exit_code == 0
    )
    r = cli.invoke(
        app, ["ask", "c", "Where did Beth move?", "--db", db, "--model", "keyword", "--agent", "--json"]
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["status"] == "complete" and data["citations"][0]["line_start"] == 9


# -- the memory as an index, read by the memory answer step (--mode retrieve) -------------------------


def test_retrieve_reads_the_index_s_messages_with_the_memory_answer_step(tmp_path: Path) -> None:
    model = Counting()
    with KnowTree(tmp_path / "kb.db", model=model) as kt:
        mem = _chat(kt)
        model.by_purpose.clear()
        answer = mem.ask("Where did Ann's sister Beth move for her job?", mode="retrieve", budget_tokens=200)
        calls = dict(model.by_purpose)
        via_tree = kt.tree("chat").ask("Where did Ann's sister Beth move for her job?", mode="retrieve")
    assert answer.status == "complete" and "Lisbon" in (answer.answer or "")
    c = answer.citations[0]  # a message citation: position, speaker, time (not a document quote)
    assert c.line_start == 61 and c.speaker == "Ann" and c.timestamp == "9 May 2023"
    assert answer.parts[0]["messages"] == [61]
    first, read = answer.trace[0], answer.trace[-1]
    assert first.outcome.startswith("retrieve:") and "without a model call" in first.outcome
    assert read.action == "read" and "61" in (read.source or "")
    # one answer call, no topic choice, no document answer step
    assert calls == {"memory_answer": 1}
    assert via_tree.citations[0].line_start == 61 and via_tree.parts[0]["messages"] == [61]


def test_retrieve_finding_nothing_is_no_answer(tmp_path: Path) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        mem = _chat(kt)
        answer = mem.ask("Which telescope did the astronomer calibrate?", mode="retrieve")
    assert answer.status == "none" and answer.answer is None
    assert answer.trace[-1].outcome == "not in these messages"


def test_a_long_message_is_read_in_the_passages_the_index_found(tmp_path: Path) -> None:
    from knowtree.answer.passages import covered, pieces_of
    from knowtree.types import Node, NodeKind, NodeMeta

    body = " ".join(f"Paragraph {i} talks about the {TOPICS[i % 6]} in some detail, sentence {i}." for i in range(60))
    node = Node(id="m1", kind=NodeKind.LEAF, level=0, meta=NodeMeta(), text="Ann: " + body)
    pieces = pieces_of(node)
    assert len(pieces) > 3
    # an index piece cut elsewhere than the passages: from the middle of the message
    found = body[1500:1900]
    got = covered(pieces, found)
    assert got and len(got) <= 2
    assert all(p.start <= 1900 and p.end >= 1500 for p in got)
    assert covered(pieces, "Nothing of this message is here, not one sentence of it.") == []


def test_a_line_repeated_through_a_long_message_places_nothing() -> None:
    from knowtree.answer.passages import covered, merged, pieces_of, spans_read
    from knowtree.types import Node, NodeKind, NodeMeta

    # pasted code: every block ends with the same line, so that line is in most passages
    body = "".join(
        f"Block {i} computes the {TOPICS[i % 6]} total for region {i}.\n    return process(event, retries=1)\n"
        for i in range(80)
    )
    node = Node(id="m1", kind=NodeKind.LEAF, level=0, meta=NodeMeta(), text="Ann: " + body)
    pieces = pieces_of(node)
    at = body.index("Block 50 ")
    found = body[at : at + 250]  # an index piece around block 50
    got = covered(pieces, found)
    assert 1 <= len(got) <= 2 and all(p.start <= at + 250 and p.end >= at for p in got)
    # only the repeated line: nothing is placed (before, every passage holding it was read)
    assert covered(pieces, "    return process(event, retries=1)\n") == []
    # the index's own pieces, placed exactly: the first with its speaker, overlapping ones read once
    head, mid = node.text[:300], node.text[290 + 5 : 700 + 5]
    spans = merged(spans_read(node, [head, mid]))
    assert [(p.start, p.end) for p in spans] == [(0, 700)] and spans[0].text == body[:700]
    assert spans_read(node, ["not in this message at all"]) == []


def test_wrong_message_numbers_are_mended_by_the_one_message_holding_the_answer(tmp_path: Path) -> None:
    reply = {"found": True, "answer": "Lisbon", "messages": [998, 999], "superseded": []}
    with KnowTree(tmp_path / "kb.db", model=keyword_except({"memory_answer": reply}, id="m")) as kt:
        mem = _chat(kt)
        answer = mem.ask("Where did Ann's sister Beth move for her job?", mode="retrieve")
    assert answer.status == "complete" and answer.answer == "Lisbon"
    assert answer.citations[0].line_start == 61  # of the two saying Lisbon, the one matching the question
    mend = next(s for s in answer.trace if s.action == "combine")
    assert "[998, 999]" in (mend.error or "") and "61" in (mend.outcome or "")
