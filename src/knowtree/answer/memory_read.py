"""Reading a memory's messages and answering from them: the answer call, its checks and citations.

`MemoryReading` is mixed into `knowtree.answer.memory.MemoryNavigator` (which walks the topic tree
and holds the nodes, passages and client): one answer call over the passages read (`_read`), the
answer checked against the messages it cites (`finish`), citations down to the passage, and the
answer from topic summaries when the walk stopped above the messages. `answer_evidence` reads what
the memory's index found instead of what a walk reached (`--mode retrieve`): the same answer call,
message citations and later-message-wins rule. `AnswerStream` shows the answer while it is generated.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from knowtree.answer.evidence import content_words, grounded_share, lexical_score
from knowtree.answer.indexed import evidence_step, item_leaves, piece_leaf
from knowtree.answer.passages import Passages, Piece, approx_tokens, covered, merged, quote_of, spans_read
from knowtree.answer.replies import MemoryReply
from knowtree.answer.when import only_the_day, phrases, resolved_answer, said_in
from knowtree.errors import ModelOutputError
from knowtree.llm.client import CallResult, LLMClient
from knowtree.prompts.reply import ask
from knowtree.text import clip, human_range, human_time, phrase_in, stem
from knowtree.types import Answer, Citation, NavStep, Node, Usage

if TYPE_CHECKING:
    from knowtree.retrieve.treesearch import Evidence


@dataclass
class Retrieval:
    """What a walk read: message leaves in reading order, where each came from, and the cost."""

    messages: list[str] = field(default_factory=list)  # leaf ids
    origin: dict[str, str] = field(default_factory=dict)  # leaf id → "tree" | "hybrid" | "index"
    passages: dict[str, list[Piece]] = field(default_factory=dict)  # leaf id → its passages read
    topics: list[str] = field(default_factory=list)  # message topics reached
    summary_stop: str | None = None  # a topic whose summary answered the question
    trace: list[NavStep] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    def tokens(self, nodes: dict[str, Node]) -> int:
        return sum(approx_tokens(p.text) for m in self.messages for p in self.passages.get(m, [])) or sum(
            approx_tokens(nodes[m].text) for m in self.messages
        )


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


class MemoryReading:
    """The answering half of `MemoryNavigator` (which sets these attributes)."""

    name: str
    nodes: dict[str, Node]
    root: Node
    client: LLMClient | None
    passages: Passages
    rows: dict[int, dict[str, Any]]
    parent: dict[str, str]
    on_token: Callable[[str], None] | None

    if TYPE_CHECKING:

        def record(
            self, r: Retrieval, step: NavStep, usage: Usage | None = None, started: float | None = None
        ) -> None: ...

    def _answer_call(self, **values: object) -> CallResult[MemoryReply]:
        """The one answer request (streamed when a token sink is set); callers handle its failure."""
        assert self.client is not None
        return ask(
            self.client,
            MemoryReply,
            "memory_answer",
            **values,
            purpose="memory_answer",
            max_tokens=220,
            on_text=AnswerStream(self.on_token) if self.on_token else None,
        )

    def _pos(self, leaf: str) -> int:
        return self.nodes[leaf].spans[0].line_start

    def read_evidence(
        self, evidence: Sequence[Evidence], texts: Mapping[str, str] | None = None
    ) -> Retrieval:
        """The index's evidence as a reading: the messages its items hold, in time order, each with the
        stretches of it that the items cover. A message of one passage is read whole; of a longer
        message, the index pieces' own spans when `texts` (index entry id → its text, a verbatim slice
        of the message leaf) places them, else the passages an item's text overlaps, else the one
        sharing most of its words."""
        r = Retrieval()
        for ev in evidence:
            for leaf in (n.id for n in item_leaves(ev, self.nodes)):
                pieces = self._stretches(leaf, ev, texts)
                if not pieces:
                    continue
                have = r.passages.setdefault(leaf, [])
                have.extend(p for p in pieces if p not in have)
                r.origin.setdefault(leaf, "index")
        for leaf, pieces in r.passages.items():
            r.passages[leaf] = merged(sorted(pieces, key=lambda p: p.start))
        r.messages = sorted(r.passages, key=self._pos)
        return r

    def _stretches(self, leaf: str, ev: Evidence, texts: Mapping[str, str] | None) -> list[Piece]:
        """What an evidence item has of one message (see `read_evidence`)."""
        pieces = self.passages.of(leaf)
        if len(pieces) <= 1:
            return pieces
        if texts is not None:
            own = [texts.get(p, "") for p in ev.pieces if piece_leaf(p) == leaf]
            if spans := spans_read(self.nodes[leaf], own):
                return spans
        return covered(pieces, ev.text) or [self.passages.best(leaf, ev.text)]

    def answer_evidence(
        self,
        question: str,
        evidence: Sequence[Evidence],
        texts: Mapping[str, str] | None = None,
        *,
        judged: bool = False,
    ) -> Answer:
        """`--mode retrieve` on a memory: the messages the index found (no model call) read by the
        memory answer step in one call (`_read`: streamed, message numbers, a later message winning
        over an earlier one it contradicts), checked by `finish`. Nothing found: status none.
        `texts`: as for `read_evidence`; `judged`: the evidence was packed after `--mode nav`'s judge."""
        total = Retrieval()
        self.record(total, evidence_step(self.root.id, evidence, judged))
        r = self.read_evidence(evidence, texts)
        reply = self._read(question, r.messages, total, r.passages)
        if reply is not None and reply.found and reply.answer.strip():
            return self.finish(question, reply, r.messages, total, r.passages)
        return Answer(question=question, answer=None, status="none", trace=total.trace, usage=total.usage)

    def _read(
        self,
        question: str,
        leaves: Sequence[str],
        total: Retrieval,
        passages: dict[str, list[Piece]] | None = None,
    ) -> MemoryReply | None:
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
        step = NavStep(
            action="read",
            node_id=topics[0] if topics else None,
            source=f"{self.name}: messages " + ", ".join(str(self._pos(m)) for m in ordered),
        )
        started = time.monotonic()
        try:
            result = self._answer_call(
                context="\n" + context if context else "", messages=lines, question=question
            )
        except ModelOutputError as exc:
            if isinstance(exc.usage, Usage):
                total.usage.add(exc.usage)
            step.error, step.outcome = str(exc), "no usable reply: treated as no answer"
            self.record(total, step, started=started)
            return None
        reply = result.value
        step.reason = clip(reply.answer, 200)
        step.outcome = "found" if reply.found else "not in these messages"
        self.record(total, step, result.usage, started)
        return reply

    def finish(
        self,
        question: str,
        reply: MemoryReply,
        leaves: Sequence[str],
        total: Retrieval,
        passages: dict[str, list[Piece]] | None = None,
    ) -> Answer:
        by_pos = {self._pos(m): m for m in leaves}
        cited = [by_pos[p] for p in dict.fromkeys(reply.messages) if p in by_pos]
        status = "complete"
        if not cited and (said := self._saying(reply.answer, question, leaves)) is not None:
            # wrong numbers, but the answer's own words are in one message shown: that one is cited
            cited = [said]
            self.record(
                total,
                NavStep(
                    action="combine",
                    outcome=f"cited message {self._pos(said)}: the one shown that holds the answer's words",
                    error=f"the reply cited {reply.messages}, not among the messages shown",
                ),
            )
        said = self._time_source(reply.answer, question, cited, leaves) if cited else None
        if said is not None and said not in cited:
            # the answer's time words ("last week") are in none of the cited messages, but in one shown
            # message about the question: that one said them, so it dates them and is cited
            self.record(
                total,
                NavStep(
                    action="combine",
                    outcome=f"cited message {self._pos(said)}: the one shown that says the answer's time words",
                    error=f"the reply cited {[self._pos(m) for m in cited]}, which do not say them",
                ),
            )
            cited = [said]
        text, redated = self._dated(reply.answer.strip(), cited, question, said)
        if redated:
            self.record(
                total,
                NavStep(
                    action="combine", outcome="answered with the message's own time words", reason=redated
                ),
            )
        if not cited:
            # an answer without valid message numbers is not verified: kept, marked partial, and cites
            # what was read
            status = "partial"
            text += " [unverified: the reply cited no message that was shown]"
            self.record(
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

    def _saying(self, answer: str, question: str, leaves: Sequence[str]) -> str | None:
        """The message among `leaves` that holds every content word the answer adds to the question
        (the best match for the answer, then the question, then the latest, when several do); None
        when the answer adds no word or no message holds them all."""
        asked = {stem(w) for w in content_words(question)}
        if all(stem(w) in asked for w in content_words(answer)):
            return None
        holding = [m for m in leaves if grounded_share(answer, question, self.nodes[m].text) == 1.0]

        def fit(m: str) -> tuple[float, float, int]:
            return (*self._about(m, answer, question), self._pos(m))

        return max(holding, key=fit, default=None)

    def _dated(
        self, answer: str, cited: Sequence[str], question: str, said: str | None = None
    ) -> tuple[str, str | None]:
        """The answer with its relative times ("last year") resolved against the date of the message
        that says them (`said`, from `_time_source`; else the first cited message): `answer.when`. An
        answer that is only the cited message's own date, while that message dates the event
        relative to itself ("I went yesterday"), is answered with the message's words, resolved.
        Returns (answer, what was re-dated: for the trace)."""
        if not cited:
            return answer, None
        if said is not None or phrases(answer):
            when = self._time(said or cited[0])
            return (
                (resolved_answer(answer, datetime.fromisoformat(when).date()), None)
                if when
                else (answer, None)
            )
        when = self._time(cited[0])
        if not when:
            return answer, None
        day = datetime.fromisoformat(when).date()
        if not only_the_day(answer, day):
            return answer, None
        asked = content_words(question)
        near = said_in(self.nodes[cited[0]].text, {*asked, *map(stem, asked)}, day)
        if near is None:
            return answer, None
        phrase, _meaning = near
        return resolved_answer(
            phrase, day
        ), f"{answer!r} is the date of message {self._pos(cited[0])}, which says {phrase!r}"

    def _time_source(
        self, answer: str, question: str, cited: Sequence[str], leaves: Sequence[str]
    ) -> str | None:
        """The message that says the answer's relative time words: of the cited ones saying them, the
        one about the answer and the question (the first cited on a tie, as when two say "last
        week"); when none does, of the shown messages saying them and sharing a word with the
        question, the one about the answer and the question. None when the answer has no such words
        or no message qualifies."""
        said = phrases(answer)
        if not said:
            return None

        def says(m: str) -> bool:
            return any(phrase_in(p, self.nodes[m].text) for p in said)

        def about(m: str) -> tuple[float, float]:
            return self._about(m, answer, question)

        saying = [m for m in cited if says(m)]
        if saying:
            return max(saying, key=about)
        shown = [m for m in leaves if says(m) and lexical_score(question, self.nodes[m].text) > 0]
        return max(shown, key=about, default=None)

    def _about(self, leaf: str, answer: str, question: str) -> tuple[float, float]:
        text = self.nodes[leaf].text
        return lexical_score(answer, text), lexical_score(question, text)

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
        step = NavStep(action="read", node_id=node_id, source=f"{self.name}: summaries of {node.meta.title}")
        started = time.monotonic()
        try:
            result = self._answer_call(
                context="\nThese are topic summaries; a topic's number is its first message.\n",
                messages=lines,
                question=question,
            )
        except ModelOutputError as exc:
            step.error = str(exc)
            self.record(total, step, started=started)
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
        self.record(total, step, result.usage, started)
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
