"""Retrieval over a conversation's topic tree: hybrid scores, top-down multi-resolution walk, answers
with message-level citations.

`MemoryNavigator.retrieve(question)` walks down from the root. At each topic with several children the
model sees every child (name, dates, summary and the child's best-matching message by hybrid search)
and picks one, or says the summaries shown already answer the question (option 0): then the walk
stops at that resolution, if an answer from the summaries can be had; otherwise it descends on. A
topic whose children are messages is read. Messages are added up to the token budget: the reached
topic's messages, then the best hybrid-scored messages of the memory. If the answer is not in what
was read, the topic is marked tried and the walk backtracks (up to `max_attempts`).

Hybrid search: BM25 (SQLite FTS5 over messages and topic metadata) fused with embeddings (the shipped
static embedder, computed on the fly) by reciprocal rank; a subtree scores as its best node.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, field_validator

from knowtree.build.conversation import clip, human_range, human_time, message_line
from knowtree.errors import ConfigError, ModelOutputError
from knowtree.llm.base import Message
from knowtree.llm.client import LLMClient
from knowtree.navigate.evidence import lexical_score
from knowtree.prompts import render
from knowtree.retrieve.bm25 import LexicalIndex, Passage
from knowtree.retrieve.hybrid import EMBEDDING_WEIGHT, RRF_C
from knowtree.types import Answer, Citation, NavStep, Node, Usage

EventSink = Callable[[NavStep], None]
SearchFn = Callable[[str, int], list[tuple[str, float]]]  # (query, limit) → (node id, score)


def approx_tokens(text: str) -> int:
    """Tokens ≈ characters / 4, rounded up (the same rule the benchmark applies to every method)."""
    return math.ceil(len(text) / 4)


@dataclass
class MemoryOptions:
    budget_tokens: int = 800  # message text read for an answer
    max_attempts: int = 2  # topics tried before giving up (backtracking)
    hybrid: bool = True  # fill the budget with the best hybrid-scored messages after the tree's own


class _Choice(BaseModel):
    reason: str = ""
    choice: int


class _Reply(BaseModel):
    found: bool
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
    topics: list[str] = field(default_factory=list)  # message topics reached
    summary_stop: str | None = None  # a topic whose summary answered the question
    trace: list[NavStep] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    def tokens(self, nodes: dict[str, Node]) -> int:
        return sum(approx_tokens(nodes[m].text) for m in self.messages)


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


class HybridScorer:
    """Weighted reciprocal-rank fusion of BM25 and embedding similarity over every node of a memory.

    BM25 runs on an in-memory FTS5 index (porter stemming) of the messages and the topics' names,
    summaries and metadata, built on first use. The weights are BM25 1.0 and the embedding's
    `EMBEDDING_WEIGHT` with the RRF constant `RRF_C` (retrieve/hybrid.py, tuned on the dev sets for
    the default embedder; with the earlier 64-dim static model 1.0/0.3 at c = 60 was best here:
    evidence-turn hit rate at 400 tokens on the five LoCoMo dev conversations BM25 0.668, embeddings
    0.305, 1.0/0.3 fusion 0.665).
    """

    def __init__(
        self,
        nodes: dict[str, Node],
        search: SearchFn | None = None,
        embedder: Any = None,
        *,
        lexical_weight: float = 1.0,
        embedding_weight: float = EMBEDDING_WEIGHT,
    ) -> None:
        self.nodes = nodes
        self.search = search
        self.embedder = embedder
        self.weights = (lexical_weight, embedding_weight)
        self.error: str | None = None
        self._ids = [n.id for n in nodes.values() if n.kind.value != "root"]
        self._matrix: Any = None
        self._index: LexicalIndex | None = None

    def _text(self, node: Node) -> str:
        if node.is_leaf:
            return node.text
        m = node.meta
        return " ".join([m.title, m.summary, *m.noteworthy_events, *m.about])

    def _lexical(self, question: str) -> list[tuple[str, float]]:
        if self.search is not None:
            return self.search(question, 200)
        if self._index is None:
            self._index = LexicalIndex(":memory:", name="memory")
            self._index.add([Passage(i, self._text(self.nodes[i])) for i in self._ids])
        return self._index.search(question, 200)

    def scores(self, question: str) -> dict[str, float]:
        """Fused score per node (higher is better); only nodes that matched at all appear."""
        out: dict[str, float] = {}
        wl, we = self.weights
        if wl:
            for rank, (nid, _) in enumerate(self._lexical(question)):
                if nid in self.nodes:
                    out[nid] = out.get(nid, 0.0) + wl / (RRF_C + rank)
        if self.embedder is not None and we:
            try:
                import numpy as np

                if self._matrix is None:
                    self._matrix = self.embedder.embed([self._text(self.nodes[i]) for i in self._ids])
                q = self.embedder.embed([question])[0]
                sims = self._matrix @ q
                for rank, j in enumerate(np.argsort(-sims)[:200]):
                    nid = self._ids[int(j)]
                    out[nid] = out.get(nid, 0.0) + we / (RRF_C + rank)
            except (ConfigError, ImportError, ValueError) as exc:  # no embedder: lexical only, noted
                self.error = f"embeddings unavailable, BM25 only: {exc}"
                self.embedder = None
        return out


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
            hit = f"\n   closest message: {message_line(self.nodes[best], 100)}" if best else ""
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

    def _fill(self, r: Retrieval, scores: dict[str, float], budget: int) -> None:
        """Trim the tree's messages to the budget, then add the best hybrid messages that fit."""
        used = 0
        kept = []
        for m in r.messages:
            t = approx_tokens(self.nodes[m].text)
            if used + t > budget:
                break
            kept.append(m)
            used += t
        r.messages = kept
        if not self.options.hybrid:
            return
        ranked = sorted((nid for nid in scores if self.nodes[nid].is_leaf), key=lambda i: -scores[i])
        for m in ranked:
            if m in r.messages:
                continue
            t = approx_tokens(self.nodes[m].text)
            if used + t > budget:
                break
            r.messages.append(m)
            r.origin[m] = "hybrid"
            used += t

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
            reply = self._read(question, r.messages, total)
            if reply is not None and reply.found and reply.answer.strip():
                return self._finish(question, reply, r.messages, total)
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

    def _read(self, question: str, leaves: Sequence[str], total: Retrieval) -> _Reply | None:
        if not leaves:
            return None
        ordered = sorted(leaves, key=self._pos)  # time order: later messages come later
        lines = "\n".join(message_line(self.nodes[m], 400) for m in ordered)
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

    def _finish(self, question: str, reply: _Reply, leaves: Sequence[str], total: Retrieval) -> Answer:
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
        citations = [self._citation(m) for m in cited]
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

    def _citation(self, leaf: str) -> Citation:
        node = self.nodes[leaf]
        pos = self._pos(leaf)
        row = self.rows.get(pos, {})
        speaker = node.text.partition(": ")[0]
        return Citation(
            file=self.name,
            line_start=pos,
            line_end=pos,
            node_id=leaf,
            quote=clip(node.text.partition(": ")[2], 300),
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
                citations.append(self._citation(leaf))
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
