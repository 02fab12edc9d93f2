"""Agent mode: the model explores the topic tree itself with two tools, within a step limit.

Tools (one JSON action per step, validated against a schema, so any model with structured output can
play, tool-calling API or not):

* ``view``: a node's name, dates, summary and its children (id, message range, name, summary);
* ``read``: messages i..j verbatim (at most `max_read` at once; of a message longer than one passage,
  the passages closest to the question, each saying which characters of the message it holds);
* ``answer``: the final answer, with the numbers of the supporting messages (checked: only messages
  the agent has read can be cited).

The agent starts having seen the root. When the step limit is reached without an answer, the result
is "none" with the whole exploration in the trace; a malformed action is recorded in the trace and
costs a step, never becomes an answer.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel

from knowtree.answer.evidence import lexical_score
from knowtree.answer.memory import MemoryNavigator, Retrieval
from knowtree.answer.replies import MemoryReply
from knowtree.errors import ModelOutputError
from knowtree.prompts.reply import ask, at_most, string
from knowtree.prompts.show import message_line
from knowtree.text import clip, human_range
from knowtree.types import Answer, NavStep, Usage


class Action(BaseModel):
    """One step of the agent: a tool and its arguments (only `tool` is required)."""

    tool: Literal["view", "read", "answer"]
    node: str = string(20)
    start: int = 0
    end: int = 0
    answer: str = string(300)
    messages: list[int] = at_most(6, list)


ID_CHARS = 8  # node ids are shown (and accepted) by their first characters
PASSAGES_PER_READ = 2  # of a long message, the passages a `read` shows (those closest to the question)


class MemoryAgent:
    def __init__(self, nav: MemoryNavigator, *, max_steps: int = 8, max_read: int = 12) -> None:
        self.nav = nav
        self.max_steps = max_steps
        self.max_read = max_read

    def view(self, node_id: str) -> str:
        """The `view` tool's result: the node and its children, one line each."""
        nodes = self.nav.nodes
        matches = [n for n in nodes if n.startswith(node_id.strip())] if node_id.strip() else []
        if len(matches) != 1:
            return f"view {node_id}: no such node (use an id from a children list)"
        node = nodes[matches[0]]
        lines = [
            f"view {node.id[:ID_CHARS]}: {node.meta.title or 'untitled'} ({human_range(node.meta.time_range)}, "
            f"messages {node.spans[0].line_start}-{node.spans[0].line_end}): {clip(node.meta.summary, 300)}"
        ]
        for c in node.children:
            k = nodes[c]
            if k.is_leaf:
                lines.append(f"  {message_line(k, 160)}")
            else:
                kind = "messages" if nodes[k.children[0]].is_leaf else "topics"
                lines.append(
                    f"- {k.id[:ID_CHARS]} [{k.spans[0].line_start}-{k.spans[0].line_end}] {k.meta.title} "
                    f"({human_range(k.meta.time_range)}; {kind}): {clip(k.meta.summary, 160)}"
                )
        return "\n".join(lines)

    def read(self, start: int, end: int, question: str = "") -> tuple[str, list[str]]:
        """The `read` tool's result: messages start..end verbatim (clamped to `max_read`); of a long
        message, the `PASSAGES_PER_READ` passages closest to the question, each with its position."""
        if end < start:
            start, end = end, start
        end = min(end, start + self.max_read - 1)
        leaves = [n for n in self.nav.nodes.values() if n.is_leaf and start <= n.spans[0].line_start <= end]
        leaves.sort(key=lambda n: n.spans[0].line_start)
        if not leaves:
            return f"read {start}-{end}: no messages there", []
        lines = []
        for n in leaves:
            pieces = self.nav.passages.of(n.id)
            if len(pieces) > PASSAGES_PER_READ:
                best = sorted(pieces, key=lambda p: (-lexical_score(question, p.text), p.index))
                pieces = sorted(best[:PASSAGES_PER_READ], key=lambda p: p.index)
            lines.extend(self.nav.passages.line(p) for p in pieces)
        return f"read {start}-{end}:\n" + "\n".join(lines), [n.id for n in leaves]

    def ask(self, question: str) -> Answer:
        question = question.strip()
        total = Retrieval()
        seen = [self.view(self.nav.root.id)]
        read: list[str] = []
        client = self.nav.client
        assert client is not None
        for step_no in range(1, self.max_steps + 1):
            started = time.monotonic()
            try:
                result = ask(
                    client,
                    Action,
                    "memory_agent",
                    steps=self.max_steps,
                    max_read=self.max_read,
                    question=question,
                    seen="\n\n".join(seen)[-6000:],
                    step=step_no,
                    purpose="memory_agent",
                    max_tokens=200,
                )
            except ModelOutputError as exc:
                if isinstance(exc.usage, Usage):
                    total.usage.add(exc.usage)
                self.nav.record(total, NavStep(action="choose", error=str(exc), outcome="invalid tool call"))
                continue
            act = result.value
            if act.tool == "view":
                out = self.view(act.node)
                seen.append(out)
                step = NavStep(action="choose", node_id=act.node, outcome=out.splitlines()[0][:200])
            elif act.tool == "read":
                out, ids = self.read(act.start, act.end, question)
                seen.append(out)
                read.extend(i for i in ids if i not in read)
                step = NavStep(
                    action="read",
                    source=f"{self.nav.name}: messages {act.start}-{act.end}",
                    outcome=out[:120],
                )
            else:
                self.nav.record(total, NavStep(action="combine", outcome="answer"), result.usage, started)
                if not act.answer.strip():
                    break
                reply = MemoryReply(found=True, answer=act.answer, messages=act.messages, superseded=[])
                if not read:
                    return self._none(question, total, "answered without reading any message")
                return self.nav.finish(question, reply, read, total)
            self.nav.record(total, step, result.usage, started)
        return self._none(question, total, f"no answer within {self.max_steps} steps")

    def _none(self, question: str, total: Retrieval, why: str) -> Answer:
        self.nav.record(total, NavStep(action="exhausted", outcome=why))
        return Answer(question=question, answer=None, status="none", trace=total.trace, usage=total.usage)
