"""Conversation memory on the real embedded model: a short chat, a dated question, streamed tokens.

Skipped when the [local] extra is not installed or KNOWTREE_SKIP_EMBEDDED=1 (see conftest.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import knowtree

pytestmark = pytest.mark.embedded

CHAT = [
    ("Ann", "Guess what, I adopted a puppy yesterday! His name is Biscuit.", "3:10 pm on 8 May, 2023"),
    ("Bo", "No way! What breed is Biscuit?", "3:11 pm on 8 May, 2023"),
    ("Ann", "He is a beagle, three months old.", "3:12 pm on 8 May, 2023"),
    ("Bo", "I started learning the cello last week, it is hard.", "10:00 am on 20 May, 2023"),
    ("Ann", "Cool! Biscuit chewed my shoes, by the way.", "10:01 am on 20 May, 2023"),
]


def test_a_short_chat_is_indexed_and_answered_with_a_dated_message_citation(tmp_path: Path) -> None:
    with knowtree.open(tmp_path / "kb.db", threads=2) as kt:
        mem = kt.memory("chat")
        report = mem.add([{"role": "user", "name": n, "content": c, "timestamp": t} for n, c, t in CHAT])
        assert report.messages == 5 and report.usage.calls <= 4
        tree = kt.tree("chat")
        assert [tree.nodes[s].meta.title for s in tree.root.children] == [
            "session — 8 May 2023, 3:10 pm",
            "session — 20 May 2023, 10:00 am",
        ]

        async def consume() -> list[dict[str, Any]]:
            return [e async for e in mem.stream("What breed is Ann's puppy Biscuit?")]

        events = asyncio.run(consume())
        answer = events[-1]["answer"]
        assert answer.status == "complete" and "beagle" in answer.answer.lower()
        assert answer.citations and answer.citations[0].line_start == 3
        assert events[0]["event"] == "step" and any(e["event"] == "token" for e in events)
