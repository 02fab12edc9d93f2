"""Retrieval over a conversation's topic tree: hybrid scores, top-down multi-resolution walk, answers
with message-level citations.

`MemoryNavigator.retrieve(question)` walks down from the root. At each topic with several children the
model sees every child (name, dates, summary and the child's best-matching message by hybrid search)
and picks one, or says the summaries shown already answer the question (option 0): then the walk
stops at that resolution, if an answer from the summaries can be had; otherwise it descends on. A
topic whose children are messages is read. The token budget is filled with passages
(`knowtree.answer.passages`: a long message is read in ~600-character passages, never clipped): the
reached topic's messages, then the best hybrid-scored passages of the memory. If the answer is not in
what was read, the topic is marked tried and the walk backtracks (up to `max_attempts`). A citation
names the message and the characters of the passage that holds the answer.

Hybrid search (`knowtree.answer.hybrid`): BM25 (SQLite FTS5 over passages and topic metadata) fused
with embeddings (the shipped static embedder, computed on the fly) by reciprocal rank; a message
scores as its best passage, a subtree as its best node.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, StrictBool, StrictInt, field_validator

from knowtree.answer.evidence import lexical_score
from knowtree.answer.hybrid import HybridScorer
from knowtree.answer.passages import Passages, Piece, approx_tokens, fill, quote_of
from knowtree.errors import ModelOutputError
from knowtree.llm.base import Message
from knowtree.llm.client import LLMClient
from knowtree.prompts import render
from knowtree.text import clip, human_range, human_time
from knowtree.types import Answer, Citation, NavStep, Node, Usage

EventSink = Callable[[NavStep], None]


@dataclass
class MemoryOptions:
    budget_tokens: int = 800  # message text read for an answer
    max_attempts: int = 2  # topics tried before giving up (backtracking)
    hybrid: bool = True  # fill the budget with the best hybrid-scored messages after the tree's own


class _Choice(BaseModel):
    reason: str = ""
    choice: StrictInt  # `true` is not option 1


class _Reply(BaseModel):
    found: StrictBool
    answer: str = ""
    messages: list[int] = Field(default_factory=list)
    superseded: list[int] = Field(default_factory=list)

    @field_validator("messages", "superseded", mode="before")
    @classmethod
    def _ints(cls, v: Any) -> Any:
        if v is None:
            return []
        if isinstance(v, int | str):
            v = [v]
        out = []
        for x in v:
            try:
                out.append(int(str(x).strip(" []#")))
            except ValueError:
                continue
        return out


ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "found": {"type": "boolean"},
        "answer": {"type": "string", "maxLength": 300},
        "messages": {"type": "array", "items": {"type": "integer"}, "maxItems": 6},
        "superseded": {"type": "array", "items": {"type": "integer"}, "maxItems": 4},
    },
    "required": ["found", "answer", "messages", "superseded"],
}


@dataclass
class Retrieval:
    """What a walk read: message leaves in reading order, where each came from, and the cost."""

    messages: list[str] = field(default_factory=list)  # leaf ids
    origin: dict[str, str] = field(default_factory=dict)  # leaf id → "tree" | "hybrid"
    passages: dict[str, list[Piece]] = field(default_factory=dict)  # leaf id → its passages read
    topics: list[str] = field(default_factory=list)  # message topics reached
    summary_stop: str | None = None  # a topic whose summary answered the question
    trace: list[NavStep] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    def tokens(self, nodes: dict[str, Node]) -> int:
        return sum(
            approx_tokens(p.text) for m in self.messages for p in self.passages.get(m, [])
        ) or sum(approx_tokens(nodes[m].text) for m in self.messages)


class AnswerStream:
    """Feeds the `answer` field of a streamed JSON reply to `sink` as it is generated (only after
    `"found": true`), so an application can show the answer while the model is still writing it."""

    def __init__(self, sink: Callable[[str], None]) -> None:
        self.sink = sink
        self.buf = ""
        self.pos = -1  # where the answer's characters start in buf; -1 until found
        self.done = False
        self.escape = False

    def __call__(self, piece: str) -> None:
        if self.done:
            return
        self.buf += piece
        if self.pos < 0:
            m = _ANSWER_START.search(self.buf)
            if m is None or not _FOUND_TRUE.search(self.buf[: m.start()]):
                return
            self.pos = m.end()
        out = []
        while self.pos < len(self.buf):
            ch = self.buf[self.pos]
            self.pos += 1
            if self.escape:
                out.append({"n": "\n", "t": "\t"}.get(ch, ch))
                self.escape = False
            elif ch == "\\":
                self.escape = True
            elif ch == '"':
                self.done = True
                break
            else:
                out.append(ch)
        if out:
            self.sink("".join(out))


_ANSWER_START = re.compile(r'"answer"\s*:\s*"')
_FOUND_TRUE = re.compile(r'"found"\s*:\s*true')


def _system() -> Message:
    return Message(role="system", content=render("system"))


class MemoryNavigator:
    def __init__(
        self,
        name: str,
        nodes: dict[str, Node],
        root_id: str,
        client: LLMClient | None,
        *,
        options: MemoryOptions | None = None,
        scorer: HybridScorer | None = None,
        messages: dict[int, dict[str, Any]] | None = None,
        on_step: EventSink | None = None,
        on_token: Callable[[str], None] | None = None,
    ) -> None:
        self.on_token = on_token
        self.name = name
        self.nodes = nodes
        self.root = nodes[root_id]
        self.client = client
        self.options = options or MemoryOptions()
        self.scorer = scorer or HybridScorer(nodes, None)
        self.passages: Passages = self.scorer.passages
        self.rows = messages or {}
        self.on_step = on_step
        self.parent = {c: n.id for n in nodes.values() for c in n.children}

    # -- helpers -------------------------------------------------------------------------------
    def _step(
        self, r: Retrieval, step: NavStep, usage: Usage | None = None, started: float | None = None
    ) -> None:
        if usage is not None:
            step.tokens = usage.input_tokens + usage.output_tokens
            step.cached = usage.cached > 0 and usage.calls == 0
            r.usage.add(usage)
        if started is not None:
            step.latency_s = round(time.monotonic() - started, 3)
        r.trace.append(step)
        if self.on_step:
            self.on_step(step)

    def _aggregate(self, scores: dict[str, float]) -> dict[str, float]:
        """A subtree's score: the best of its own and its descendants'."""
        agg: dict[str, float] = {}

        def visit(nid: str) -> float:
            node = self.nodes[nid]
            best = scores.get(nid, 0.0)
            for c in node.children:
                best = max(best, visit(c))
            agg[nid] = best
            return best

        visit(self.root.id)
        return agg

    def _best_leaf(self, nid: str, scores: dict[str, float]) -> str | None:
        best, score = None, 0.0
        stack = [nid]
        while stack:
            node = self.nodes[stack.pop()]
            if node.is_leaf:
                if scores.get(node.id, 0.0) > score:
                    best, score = node.id, scores[node.id]
            else:
                stack.extend(node.children)
        return best

    def _answer_call(self, prompt: str) -> Any:
        """The one answer request (streamed when a token sink is set); callers handle its failure."""
        assert self.client is not None
        return self.client.structured(
            [_system(), Message(role="user", content=prompt)],
            _Reply,
            schema=ANSWER_SCHEMA,
            purpose="memory_answer",
            max_tokens=220,
            on_text=AnswerStream(self.on_token) if self.on_token else None,
        )

    def _pos(self, leaf: str) -> int:
        return self.nodes[leaf].spans[0].line_start

    # -- the walk ------------------------------------------------------------------------------
    def retrieve(
        self,
        question: str,
        budget_tokens: int | None = None,
        *,
        tried: set[str] | None = None,
        allow_stop: bool = False,
    ) -> Retrieval:
        """One walk down to a message topic not in `tried`; messages are filled up to the budget.

        With `allow_stop`, the walk may stop at a level whose summaries answer the question
        (`summary_stop` is set then and no messages are read)."""
        budget = budget_tokens or self.options.budget_tokens
        r = Retrieval()
        scores = self.scorer.scores(question)
        if self.scorer.error:
            self._step(r, NavStep(action="decompose", outcome="hybrid search", error=self.scorer.error))
        agg = self._aggregate(scores)
        topic = self._descend(question, r, scores, agg, set(tried or ()), allow_stop=allow_stop)
        if topic is None:
            self._step(r, NavStep(action="exhausted", outcome="every topic has been tried"))
        elif r.summary_stop:
            return r
        else:
            r.topics.append(topic)
            r.messages = list(self.nodes[topic].children)
            r.origin = dict.fromkeys(r.messages, "tree")
        self._fill(r, scores, budget)
        return r

    def _descend(
        self,
        question: str,
        r: Retrieval,
        scores: dict[str, float],
        agg: dict[str, float],
        dead: set[str],
        *,
        allow_stop: bool,
    ) -> str | None:
        node = self.root
        while True:
            kids = [c for c in node.children if c not in dead]
            if not kids:
                dead.add(node.id)
                if node.id == self.root.id:
                    return None
                node = self.root
                continue
            if self.nodes[kids[0]].is_leaf:
                return node.id
            if len(kids) == 1:
                choice = kids[0]
                self._step(
                    r,
                    NavStep(
                        action="choose",
                        node_id=node.id,
                        options=kids,
                        choice=choice,
                        reason="only one option",
                    ),
                )
            else:
                choice = self._choose(question, node, kids, r, scores, agg, allow_stop=allow_stop)
                if choice == "":
                    return node.id  # summaries answered: r.summary_stop is set
            node = self.nodes[choice]

    def _choose(
        self,
        question: str,
        node: Node,
        kids: list[str],
        r: Retrieval,
        scores: dict[str, float],
        agg: dict[str, float],
        *,
        allow_stop: bool,
    ) -> str:
        lines = []
        for i, k in enumerate(kids, 1):
            n = self.nodes[k]
            best = self._best_leaf(k, scores)
            hit = f"\n   closest message: {self._closest(best, scores)}" if best else ""
            lines.append(
                f"{i}: {n.meta.title or 'untitled'} ({human_range(n.meta.time_range)}, messages "
                f"{n.spans[0].line_start}-{n.spans[0].line_end})\n   {clip(n.meta.summary, 160)}{hit}"
            )
        lo = 0 if allow_stop else 1
        if allow_stop:
            lines.insert(0, "0: the summaries above already answer the question (no need to read messages)")
            lines.append(lines.pop(0))
        memory = (
            f"\nNow inside: {node.meta.title} ({human_range(node.meta.time_range)})\n"
            if node is not self.root
            else ""
        )
        prompt = render("memory_choose", question=question, memory=memory, options="\n".join(lines))
        n = len(kids)

        def in_range(reply: _Choice) -> None:
            if not lo <= reply.choice <= n:
                raise ValueError(f"choice must be one of {list(range(lo, n + 1))}, got {reply.choice}")

        step = NavStep(action="choose", node_id=node.id, options=kids)
        started = time.monotonic()
        assert self.client is not None
        try:
            result = self.client.structured(
                [_system(), Message(role="user", content=prompt)],
                _Choice,
                schema={
                    "type": "object",
                    "properties": {
                        "reason": {"type": "string", "maxLength": 200},
                        "choice": {"type": "integer", "enum": list(range(lo, n + 1))},
                    },
                    "required": ["reason", "choice"],
                },
                purpose="memory_choose",
                max_tokens=120,
                check=in_range,
            )
        except ModelOutputError as exc:
            best = max(kids, key=lambda k: agg.get(k, 0.0))
            step.choice, step.error, step.reason = best, str(exc), "fallback: best hybrid search score"
            if isinstance(exc.usage, Usage):
                r.usage.add(exc.usage)
            self._step(r, step, started=started)
            return best
        reply = result.value
        step.reason = reply.reason
        if reply.choice == 0:
            step.outcome = "the summaries answer the question: stopping at this resolution"
            self._step(r, step, result.usage, started)
            r.summary_stop = node.id
            return ""
        step.choice = kids[reply.choice - 1]
        self._step(r, step, result.usage, started)
        return step.choice

    def _closest(self, leaf: str, scores: dict[str, float]) -> str:
        """A message's best-scoring passage, as a short preview line."""
        pieces = self.passages.of(leaf)
        best = max(pieces, key=lambda p: (self.scorer.passage_scores.get(p.id, 0.0), -p.index))
        return self.passages.line(best, 100)

    def _fill(self, r: Retrieval, scores: dict[str, float], budget: int) -> None:
        """Fill the budget with passages: the tree's messages (whole when they fit, else their best
        passages), then the best hybrid-scored passages (`passages.fill`)."""
        r.passages, r.origin = fill(
            self.passages, r.messages, self.scorer.passage_scores, budget, hybrid=self.options.hybrid
        )
        r.messages = list(r.passages)

    # -- answering -----------------------------------------------------------------------------
    def ask(self, question: str) -> Answer:
        question = question.strip()
        total = Retrieval()
        r = self.retrieve(question, allow_stop=True)
        self._merge(total, r)
        if r.summary_stop:
            answer = self._answer_from_summaries(question, r.summary_stop, total)
            if answer is not None:
                return answer
            r = self.retrieve(question)  # the summaries did not do: descend to messages
            self._merge(total, r)
        tried: set[str] = set(r.topics)
        for attempt in range(self.options.max_attempts):
            reply = self._read(question, r.messages, total, r.passages)
            if reply is not None and reply.found and reply.answer.strip():
                return self._finish(question, reply, r.messages, total, r.passages)
            if attempt + 1 >= self.options.max_attempts or not r.topics:
                break
            self._step(
                total,
                NavStep(
                    action="backtrack",
                    node_id=r.topics[-1],
                    outcome=f"attempt {attempt + 1}: the messages read do not answer it",
                ),
            )
            r = self.retrieve(question, tried=tried)
            self._merge(total, r)
            if not r.messages:
                break
            tried.update(r.topics)
        return Answer(question=question, answer=None, status="none", trace=total.trace, usage=total.usage)

    @staticmethod
    def _merge(total: Retrieval, r: Retrieval) -> None:
        total.trace.extend(s for s in r.trace if s not in total.trace)
        total.usage.add(r.usage)
        r.usage = Usage()
        r.trace = []

    def _read(
        self,
        question: str,
        leaves: Sequence[str],
        total: Retrieval,
        passages: dict[str, list[Piece]] | None = None,
    ) -> _Reply | None:
        if not leaves:
            return None
        ordered = sorted(leaves, key=self._pos)  # time order: later messages come later
        # every passage read, verbatim and unclipped; a passage of a longer message says where it is
        lines = "\n".join(
            self.passages.line(p) for m in ordered for p in (passages or {}).get(m) or self.passages.of(m)
        )
        topics = []
        for m in ordered:
            p = self.parent.get(m)
            if p and p not in topics:
                topics.append(p)
        context = "".join(
            f"Topic: {self.nodes[t].meta.title} ({human_range(self.nodes[t].meta.time_range)}): "
            f"{clip(self.nodes[t].meta.summary, 200)}\n"
            for t in topics[:2]
        )
        prompt = render(
            "memory_answer", context="\n" + context if context else "", messages=lines, question=question
        )
        step = NavStep(
            action="read",
            node_id=topics[0] if topics else None,
            source=f"{self.name}: messages " + ", ".join(str(self._pos(m)) for m in ordered),
        )
        started = time.monotonic()
        try:
            result = self._answer_call(prompt)
        except ModelOutputError as exc:
            if isinstance(exc.usage, Usage):
                total.usage.add(exc.usage)
            step.error, step.outcome = str(exc), "no usable reply: treated as no answer"
            self._step(total, step, started=started)
            return None
        reply = result.value
        step.reason = clip(reply.answer, 200)
        step.outcome = "found" if reply.found else "not in these messages"
        self._step(total, step, result.usage, started)
        return reply

    def _finish(
        self,
        question: str,
        reply: _Reply,
        leaves: Sequence[str],
        total: Retrieval,
        passages: dict[str, list[Piece]] | None = None,
    ) -> Answer:
        by_pos = {self._pos(m): m for m in leaves}
        cited = [by_pos[p] for p in dict.fromkeys(reply.messages) if p in by_pos]
        status = "complete"
        text = reply.answer.strip()
        if not cited:
            # an answer without valid message numbers is not verified: kept, marked partial, and cites
            # what was read
            status = "partial"
            text += " [unverified: the reply cited no message that was shown]"
            self._step(
                total,
                NavStep(
                    action="combine",
                    outcome="no valid message numbers cited",
                    error=f"cited {reply.messages}",
                ),
            )
            cited = list(leaves)[:3]
        old = [by_pos[p] for p in dict.fromkeys(reply.superseded) if p in by_pos and by_pos[p] not in cited]
        if old:
            latest = max(cited, key=self._pos)
            was = ", ".join(
                f"message {self._pos(o)} ({human_time(self._time(o)).split(',')[0]})" for o in old
            )
            text += (
                f" (This uses the later message {self._pos(latest)} ({human_time(self._time(latest)).split(',')[0]}),"
                f" which replaces what was said earlier in {was}.)"
            )
        read = passages or {}
        citations = [self._citation(m, reply.answer, question, read.get(m)) for m in cited]
        return Answer(
            question=question,
            answer=text,
            status=status,
            citations=citations,
            trace=total.trace,
            usage=total.usage,
            parts=[
                {
                    "part": question,
                    "answer": text,
                    "messages": [self._pos(m) for m in cited],
                    "superseded": [self._pos(o) for o in old],
                }
            ],
        )

    def _time(self, leaf: str) -> str | None:
        tr = self.nodes[leaf].meta.time_range
        return tr[0] if tr else None

    def _citation(
        self, leaf: str, answer: str = "", question: str = "", read: list[Piece] | None = None
    ) -> Citation:
        """A message citation, down to the passage (of those read) holding the answer: its
        characters' position in the message (char_start/char_end) and its words as the quote."""
        node = self.nodes[leaf]
        pos = self._pos(leaf)
        row = self.rows.get(pos, {})
        speaker = node.text.partition(": ")[0]
        piece = self.passages.best(leaf, answer, question, read)
        return Citation(
            file=self.name,
            line_start=pos,
            line_end=pos,
            node_id=leaf,
            quote=quote_of(piece, answer, question),
            char_start=piece.start,
            char_end=piece.end,
            speaker=speaker,
            timestamp=row.get("timestamp") or self._time(leaf),
            message_id=row.get("source_id"),
        )

    def _best_message(self, node_id: str, answer: str, question: str) -> str | None:
        """The message under `node_id` holding most of the answer's words (then the question's)."""
        best, score = None, (0.0, 0.0, 0)
        stack = [node_id]
        while stack:
            node = self.nodes[stack.pop()]
            if node.is_leaf:
                s = (
                    lexical_score(answer, node.text),
                    lexical_score(question, node.text),
                    -self._pos(node.id),
                )
                if s > score:
                    best, score = node.id, s
            else:
                stack.extend(node.children)
        return best if score[0] > 0 or score[1] > 0 else None

    def _answer_from_summaries(self, question: str, node_id: str, total: Retrieval) -> Answer | None:
        node = self.nodes[node_id]
        kids = [self.nodes[c] for c in node.children]
        lines = "\n".join(
            f"[{k.spans[0].line_start}] {k.meta.title} ({human_range(k.meta.time_range)}): {clip(k.meta.summary, 300)}"
            for k in kids
        )
        prompt = render(
            "memory_answer",
            context="\nThese are topic summaries; a topic's number is its first message.\n",
            messages=lines,
            question=question,
        )
        step = NavStep(action="read", node_id=node_id, source=f"{self.name}: summaries of {node.meta.title}")
        started = time.monotonic()
        try:
            result = self._answer_call(prompt)
        except ModelOutputError as exc:
            step.error = str(exc)
            self._step(total, step, started=started)
            return None
        reply = result.value
        starts = {k.spans[0].line_start: k for k in kids}
        used = [starts[p] for p in dict.fromkeys(reply.messages) if p in starts]
        # grounded or not at all: the answer's words must be in the summaries it cites (a small model
        # may answer with a part's number, say), else the walk descends to the messages
        grounded = bool(used) and lexical_score(reply.answer, " ".join(k.meta.summary for k in used)) > 0
        ok = reply.found and grounded and bool(reply.answer.strip())
        step.outcome = "answered from summaries" if ok else "summaries do not answer it: descending"
        if reply.found and used and not grounded:
            step.error = f"answer {reply.answer!r} is not in the cited summaries"
        self._step(total, step, result.usage, started)
        if not ok:
            return None
        citations = []
        for k in used:
            # down to the message: the one of this topic that best matches the answer (no model call)
            leaf = self._best_message(k.id, reply.answer, question)
            if leaf is not None:
                citations.append(self._citation(leaf, reply.answer, question))
            else:
                citations.append(
                    Citation(
                        file=self.name,
                        line_start=k.spans[0].line_start,
                        line_end=k.spans[0].line_end,
                        node_id=k.id,
                        quote=clip(k.meta.summary, 300),
                        timestamp=k.meta.time_range[0] if k.meta.time_range else None,
                    )
                )
        return Answer(
            question=question,
            answer=reply.answer.strip(),
            status="complete",
            citations=citations,
            trace=total.trace,
            usage=total.usage,
            parts=[{"part": question, "answer": reply.answer.strip(), "resolution": "topic summaries"}],
        )
