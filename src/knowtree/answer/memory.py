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

Reading the messages and answering from them is `knowtree.answer.memory_read`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from knowtree.answer.hybrid import HybridScorer
from knowtree.answer.memory_read import MemoryReading, Retrieval
from knowtree.answer.passages import Passages, fill
from knowtree.answer.replies import Choice
from knowtree.errors import ModelOutputError
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import ask, narrowed
from knowtree.text import clip, human_range
from knowtree.types import Answer, NavStep, Node, Usage

EventSink = Callable[[NavStep], None]


@dataclass
class MemoryOptions:
    budget_tokens: int = 800  # message text read for an answer
    max_attempts: int = 2  # topics tried before giving up (backtracking)
    hybrid: bool = True  # fill the budget with the best hybrid-scored messages after the tree's own


class MemoryNavigator(MemoryReading):
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
    def record(
        self, r: Retrieval, step: NavStep, usage: Usage | None = None, started: float | None = None
    ) -> None:
        """Add a step to the trace (with what its call cost and took) and report it to `on_step`."""
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
            self.record(r, NavStep(action="decompose", outcome="hybrid search", error=self.scorer.error))
        agg = self._aggregate(scores)
        topic = self._descend(question, r, scores, agg, set(tried or ()), allow_stop=allow_stop)
        if topic is None:
            self.record(r, NavStep(action="exhausted", outcome="every topic has been tried"))
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
                self.record(
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
        n = len(kids)

        def in_range(reply: Choice) -> None:
            if not lo <= reply.choice <= n:
                raise ValueError(f"choice must be one of {list(range(lo, n + 1))}, got {reply.choice}")

        step = NavStep(action="choose", node_id=node.id, options=kids)
        started = time.monotonic()
        assert self.client is not None
        try:
            result = ask(
                self.client,
                narrowed(Choice, reason={"maxLength": 200}, choice={"enum": list(range(lo, n + 1))}),
                "memory_choose",
                question=question,
                memory=memory,
                options="\n".join(lines),
                purpose="memory_choose",
                max_tokens=120,
                check=in_range,
            )
        except ModelOutputError as exc:
            best = max(kids, key=lambda k: agg.get(k, 0.0))
            step.choice, step.error, step.reason = best, str(exc), "fallback: best hybrid search score"
            if isinstance(exc.usage, Usage):
                r.usage.add(exc.usage)
            self.record(r, step, started=started)
            return best
        reply = result.value
        step.reason = reply.reason
        if reply.choice == 0:
            step.outcome = "the summaries answer the question: stopping at this resolution"
            self.record(r, step, result.usage, started)
            r.summary_stop = node.id
            return ""
        step.choice = kids[reply.choice - 1]
        self.record(r, step, result.usage, started)
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
                return self.finish(question, reply, r.messages, total, r.passages)
            if attempt + 1 >= self.options.max_attempts or not r.topics:
                break
            self.record(
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
