"""Issue 13, item 5: long messages are indexed, read and cited in passages, losslessly."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from conftest import count_node_loads
from knowtree.core import KnowTree
from knowtree.llm.base import Request
from knowtree.testing.models import FunctionModel, KeywordModel

SINGLE_CHARS = 800  # knowtree.answer.passages.SINGLE_CHARS (imported in the test that needs it)

FILLER = "The quarterly report covers revenue, churn and the hiring plan for the support team. "


def _memory(kt: KnowTree, messages: list[dict[str, Any]]) -> Any:
    mem = kt.memory("lm")
    mem.embedder = None  # BM25 only: no embedder needed
    mem.add(messages)
    return mem


def test_a_fact_at_character_700_of_a_message_is_answered(tmp_path: Path) -> None:
    content = FILLER * 8 + "Ann's hiking trip to Paris is on 14 June."
    msg = {"role": "user", "name": "Ann", "content": content, "timestamp": "2024-03-01T10:00"}
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        answer = _memory(kt, [msg]).ask("When is Ann's hiking trip to Paris?")
    assert answer.status == "complete" and "14 June" in (answer.answer or "")
    [c] = answer.citations
    at = content.index("14 June")
    assert c.line_start == 1 and c.char_start is not None and c.char_end is not None
    assert c.char_start <= at < c.char_end and "14 June" in c.quote


def _chat(name: str, content: str, n: int) -> list[dict[str, Any]]:
    """n short messages from `name`, one a minute from 09:00 (`content` formatted with i)."""
    return [
        {"role": "user", "name": name, "content": content.format(i=i), "timestamp": f"2024-03-01T09:{i:02d}"}
        for i in range(n)
    ]


def _design_doc() -> tuple[str, int]:
    parts = ["Here is the design document for the platform, pasted in full:\n"]
    for i in range(48):
        parts.append(
            f"\n## Section {i}\nThe component number {i} handles queue retries and cache warming. "
            f"It keeps logs for {i + 3} days and reports to the dashboard team every morning.\n"
            "```python\n"
            f"def handler_{i}(event):\n    return process(event, retries={i % 4})\n"
            "```\n"
        )
        if i == 40:
            parts.append("\nThe billing gateway listens on port 8443 behind the internal firewall.\n")
    doc = "".join(parts)
    return doc, doc.index("port 8443")


def test_a_fact_deep_in_a_pasted_12k_document_is_found_and_cited_by_its_position(tmp_path: Path) -> None:
    doc, at = _design_doc()
    assert 9_000 < len(doc) < 16_000 and at > 8_000
    chat = _chat("Ann", "Morning! Coffee plans for Friday number {i}?", 12)
    chat.append({"role": "user", "name": "Ann", "content": doc, "timestamp": "2024-03-01T09:30"})
    chat += [
        {
            "role": "assistant",
            "content": f"Thanks, noted the document, item {i}.",
            "timestamp": f"2024-03-01T09:{31 + i:02d}",
        }
        for i in range(6)
    ]
    keyword, prompts = KeywordModel(), []

    def reply(request: Request) -> Any:
        prompts.append(request.messages[-1].content)
        return keyword.reply(request)

    with KnowTree(tmp_path / "kb.db", model=FunctionModel(reply, id="keyword")) as kt:
        mem = _memory(kt, chat)
        answer = mem.ask("Which port does the billing gateway listen on?", budget_tokens=300)
        context = mem.context("Which port does the billing gateway listen on?", 300, use_model=False)
    # the answer step read the stretches the index found (~300 tokens), not every passage holding a
    # line repeated through the pasted code (10,801 characters before)
    [read] = [p for p in prompts if "8443" in p]
    assert len(read) < 2_500
    assert answer.status == "complete" and "8443" in (answer.answer or "")
    [c] = answer.citations
    assert c.line_start == 13  # the pasted document is message 13
    assert c.char_start is not None and c.char_end is not None
    assert c.char_start <= at < c.char_end and c.char_end - c.char_start <= SINGLE_CHARS
    assert doc[c.char_start : c.char_end].startswith(c.quote.rstrip("…")[:40])
    # context() reads the passage, not the first characters of the message, within the budget
    [row] = [r for r in context if r["position"] == 13]
    assert "8443" in row["content"] and len(row["content"]) < 1_300
    assert any(p["start"] <= at < p["end"] for p in row["passages"])


def test_passages_cover_a_long_text_exactly() -> None:
    from knowtree.answer.passages import SINGLE_CHARS, split_spans

    doc, _ = _design_doc()
    spans = split_spans(doc)
    assert spans[0][0] == 0 and spans[-1][1] == len(doc)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert "".join(doc[a:b] for a, b in spans) == doc
    assert all(0 < b - a <= SINGLE_CHARS for a, b in spans)
    assert split_spans("short") == [(0, 5)]


def test_context_loads_only_the_evidence_messages_and_reads_them_as_the_whole_memory_would(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from knowtree.answer.memory import MemoryOptions
    from knowtree.memory import Memory

    doc, _ = _design_doc()
    chat = _chat("Bo", "Coffee plans for Friday number {i}?", 20)
    chat.insert(7, {"role": "user", "name": "Ann", "content": doc, "timestamp": "2024-03-01T09:06"})
    chat.append(
        {
            "role": "user",
            "name": "Ann",
            "content": "Beth moved to Lisbon in May.",
            "timestamp": "2024-03-01T09:40",
        }
    )
    questions = [
        "Which port does the billing gateway listen on?",
        "Where did Beth move?",
        "coffee on Friday number 3",
    ]
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        mem = _memory(kt, chat)
        everything = len(kt.store.load_nodes("lm"))
        loaded = count_node_loads(monkeypatch, kt.store)
        light = [mem.context(q, 120, use_model=False) for q in questions]
        assert loaded and max(loaded) < everything / 2  # the evidence's messages and the root, not the memory
        # the reference: the same evidence read by a navigator over every node and message
        monkeypatch.setattr(
            Memory, "_reader", lambda self, ev, b: self._navigator(None, MemoryOptions(budget_tokens=b))
        )
        full = [mem.context(q, 120, use_model=False) for q in questions]
    assert light == full
    assert any("8443" in str(r["content"]) for r in light[0]) and any(
        "Lisbon" in str(r["content"]) for r in light[1]
    )
    assert all(r["via"] == "index" and r["role"] and r["timestamp"] for ctx in light for r in ctx)
