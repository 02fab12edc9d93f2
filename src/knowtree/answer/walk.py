"""Answer a question by walking the tree: choose a child, read leaves, check the evidence, backtrack.

The walk (Knowledge Tree's multi-attempt search with MemWalker's working memory):

1. The question is split into parts (one part for a simple question, no model call).
2. An attempt descends from the root: at each inner node the model sees every remaining child with
   all six metadata fields, the collection's summary, the branch it is in and what has been found so
   far, and returns a reason and an index.
3. In the branch it reached, up to `leaves_per_branch` leaves are read. A leaf reply gives, per
   still-missing part, a quote and an answer; a part is answered only when the quote is found in the
   leaf and the answer's new words are grounded there (`evidence.supported`), so a small model cannot
   pass off an invented half as complete.
4. Tried leaves are removed; an exhausted branch is removed; the next attempt starts again from the
   root (unchanged choices come back from the cache). After `max_branch_attempts` attempts the best
   partial answer is returned, marked partial, or "none" when nothing verified was found.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, StrictBool, StrictInt, create_model

from knowtree.answer.evidence import content_words, is_multiple_choice, lexical_score, locate, supported
from knowtree.construct.metadata import format_meta
from knowtree.errors import ModelOutputError
from knowtree.llm.base import Message
from knowtree.llm.client import LLMClient
from knowtree.prompts import render
from knowtree.types import Answer, Citation, NavStep, Node, Usage

EventSink = Callable[[NavStep], None]


@dataclass
class WalkOptions:
    max_branch_attempts: int = 3
    leaves_per_branch: int = 2
    max_parts: int = 3
    leaf_chars: int = 6000  # a leaf's text shown to the model is cut here (the chunk size is ~5000)
    # ablations (MemWalker as published): options shown by summary only, the leaf reply trusted as it
    # is (no quote check, no partial flag), the question never split
    metadata: bool = True
    verify: bool = True


@dataclass
class _Finding:
    part: int
    answer: str
    quote: str
    node_id: str


@dataclass
class _State:
    parts: list[str]
    findings: dict[int, _Finding] = field(default_factory=dict)
    tried: set[str] = field(default_factory=set)  # leaves read
    dead: set[str] = field(default_factory=set)  # inner nodes with nothing left to try
    # multiple choice: options picked in leaves whose evidence did not verify, with the leaf ids
    votes: dict[str, list[str]] = field(default_factory=dict)
    trace: list[NavStep] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    @property
    def missing(self) -> list[int]:
        return [i for i in range(len(self.parts)) if i not in self.findings]


class _Choice(BaseModel):
    reason: str = ""
    choice: StrictInt  # `true` is not option 1


class _Parts(BaseModel):
    parts: list[str] = Field(min_length=1)


class _PartReply(BaseModel):
    found: StrictBool  # required: a garbled part is repaired or an error, not "not found"
    quote: str = ""
    answer: str = ""


class _Combined(BaseModel):
    answer: str = Field(min_length=1)


def _system() -> Message:
    return Message(role="system", content=render("system"))


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class Walker:
    def __init__(
        self,
        nodes: dict[str, Node],
        root_id: str,
        client: LLMClient,
        options: WalkOptions | None = None,
        on_step: EventSink | None = None,
    ) -> None:
        self.nodes = nodes
        self.root = nodes[root_id]
        self.client = client
        self.options = options or WalkOptions()
        self.on_step = on_step
        self.parent: dict[str, str] = {c: n.id for n in nodes.values() for c in n.children}

    # -- public --------------------------------------------------------------------------------
    def ask(self, question: str) -> Answer:
        question = question.strip()
        state = _State(parts=[question])
        state.parts = self._decompose(question, state)
        for attempt in range(self.options.max_branch_attempts):
            if not state.missing:
                break
            branch = self._descend(self.root, question, state)
            if branch is None:
                self._step(state, NavStep(action="exhausted", outcome="every branch has been tried"))
                break
            read_here = 0
            while read_here < self.options.leaves_per_branch and state.missing:
                leaves = [c for c in branch.children if c not in state.tried]
                if not leaves:
                    break
                leaf = self._choose(branch, leaves, question, state)
                self._read(self.nodes[leaf], question, state)
                read_here += 1
            if state.missing:
                untried = [c for c in branch.children if c not in state.tried]
                # a fully read branch is dead; so is a tried one, unless it is the root (a one-level
                # tree), where the next attempt simply reads further leaves
                if not untried or branch.id != self.root.id:
                    state.dead.add(branch.id)
                self._step(
                    state,
                    NavStep(
                        action="backtrack",
                        node_id=branch.id,
                        outcome=f"attempt {attempt + 1}: still missing {len(state.missing)} of "
                        f"{len(state.parts)} part(s)",
                    ),
                )
        return self._finish(question, state)

    # -- steps ---------------------------------------------------------------------------------
    def _step(self, state: _State, step: NavStep) -> None:
        state.trace.append(step)
        if self.on_step:
            self.on_step(step)

    def _decompose(self, question: str, state: _State) -> list[str]:
        simple = (
            not self.options.verify  # without verification there are no parts to keep apart
            or is_multiple_choice(question)  # the options belong with the question
            or (
                question.count("?") <= 1
                and len(question.split()) <= 14
                and not re.search(r"\b(and|also|as well as)\b|;", question, re.IGNORECASE)
            )
        )
        if simple:
            return [question]
        started = time.monotonic()
        try:
            result = self.client.structured(
                [_system(), Message(role="user", content=render("decompose", question=question))],
                _Parts,
                schema={
                    "type": "object",
                    "properties": {
                        "parts": {
                            "type": "array",
                            "items": {"type": "string", "maxLength": 200},
                            "minItems": 1,
                            "maxItems": self.options.max_parts,
                        }
                    },
                    "required": ["parts"],
                },
                purpose="decompose",
                max_tokens=200,
            )
        except ModelOutputError as exc:
            self._charge(state, exc)
            self._step(state, NavStep(action="decompose", outcome="kept the question whole", error=str(exc)))
            return [question]
        asked = set(content_words(question))
        parts: list[str] = []
        for p in result.value.parts[: self.options.max_parts]:
            words = set(content_words(p))
            # a rephrasing of a part already kept is not a new part
            if p.strip() and not any(_jaccard(words, set(content_words(q))) >= 0.5 for q in parts):
                parts.append(p.strip())
        error = None
        if not parts or any(not (set(content_words(p)) & asked) for p in parts):
            error = f"parts unrelated to the question were ignored: {parts}"
            parts = [question]
        self._usage_step(
            state,
            NavStep(
                action="decompose",
                outcome=f"{len(parts)} part(s): " + " | ".join(parts),
                error=error,
            ),
            result.usage,
            result.cached,
            started,
        )
        return parts

    @staticmethod
    def _charge(state: _State, exc: ModelOutputError) -> None:
        """Failed attempts cost tokens too: count them in the answer's usage."""
        if isinstance(exc.usage, Usage):
            state.usage.add(exc.usage)

    def _usage_step(self, state: _State, step: NavStep, usage: Usage, cached: bool, started: float) -> None:
        step.tokens = usage.input_tokens + usage.output_tokens
        step.cached = cached
        step.latency_s = round(time.monotonic() - started, 3)
        state.usage.add(usage)
        self._step(state, step)

    def _descend(self, node: Node, question: str, state: _State) -> Node | None:
        """Walk down to a node whose children are leaves; None when nothing below is left."""
        while True:
            if node.id in state.dead:
                return None
            if node.is_leaf:
                return None
            kids = [c for c in node.children if c not in state.dead and c not in state.tried]
            if not kids:
                state.dead.add(node.id)
                return None
            if self.nodes[kids[0]].is_leaf:
                return node
            child = self._choose(node, kids, question, state)
            found = self._descend(self.nodes[child], question, state)
            if found is not None:
                return found
            # the chosen child had nothing left: it is dead now, choose again among the rest

    def _memory(self, state: _State) -> str:
        if not state.findings:
            return ""
        found = "; ".join(_clip(f.answer, 160) for f in state.findings.values())
        missing = "; ".join(state.parts[i] for i in state.missing)
        return f"\nAlready found: {found}\nStill missing: {missing}\n"

    def _choose(self, node: Node, options: list[str], question: str, state: _State) -> str:
        crumbs = self._breadcrumb(node)
        if len(options) == 1:
            self._step(
                state,
                NavStep(
                    action="choose",
                    node_id=node.id,
                    breadcrumb=crumbs,
                    options=options,
                    choice=options[0],
                    reason="only one option left",
                ),
            )
            return options[0]
        if self.options.metadata:
            shown = "\n".join(
                f"Option {i}:\n{format_meta(self._short_meta(self.nodes[o]))}" for i, o in enumerate(options)
            )
        else:
            shown = "\n".join(
                f"Option {i}:\nSummary: {_clip(self.nodes[o].meta.summary, 300)}" for i, o in enumerate(options)
            )
        here = ""
        if node.id != self.root.id:  # where we are: the collection, then this branch
            here = (
                f"\nCollection: {_clip(self.root.meta.summary, 300)}\n"
                f"Current section: {_clip(node.meta.summary, 300)}\n"
            )
        prompt = render(
            "choose", breadcrumb=here, memory=self._memory(state), question=question, options=shown
        )
        n = len(options)

        def in_range(reply: _Choice) -> None:
            if not 0 <= reply.choice < n:
                raise ValueError(f"choice must be one of {list(range(n))}, got {reply.choice}")

        started = time.monotonic()
        step = NavStep(action="choose", node_id=node.id, breadcrumb=crumbs, options=options)
        try:
            result = self.client.structured(
                [_system(), Message(role="user", content=prompt)],
                _Choice,
                schema={
                    "type": "object",
                    "properties": {
                        "reason": {"type": "string", "maxLength": 240},
                        "choice": {"type": "integer", "enum": list(range(n))},
                    },
                    "required": ["reason", "choice"],
                },
                purpose="choose",
                max_tokens=160,
                check=in_range,
            )
        except ModelOutputError as exc:
            self._charge(state, exc)
            # recorded, not hidden: fall back to the option sharing most words with the question
            scores = [lexical_score(question, self._option_text(self.nodes[o])) for o in options]
            best = max(range(n), key=lambda i: scores[i])
            step.choice, step.error = options[best], str(exc)
            step.reason = "fallback: most question words in the metadata"
            self._step(state, step)
            return options[best]
        picked = result.value.choice
        described = self._described_option(result.value.reason, question, options)
        step.reason = result.value.reason
        if described is not None and described != picked:
            # small models often reason about one option and then emit another's index
            step.outcome = f"index {picked} corrected to {described}: the reason describes option {described}"
            picked = described
        step.choice = options[picked]
        self._usage_step(state, step, result.usage, result.cached, started)
        return step.choice

    def _described_option(self, reason: str, question: str, options: list[str]) -> int | None:
        """The option a reason clearly talks about: the one sharing by far the most of the reason's own
        words (those not in the question), or None when no option stands out."""
        asked = set(content_words(question))
        said = {w for w in content_words(reason) if w not in asked}
        if not said:
            return None
        overlaps = [len(said & set(content_words(self._option_text(self.nodes[o])))) for o in options]
        ranked = sorted(range(len(options)), key=lambda i: -overlaps[i])
        best = ranked[0]
        runner_up = overlaps[ranked[1]] if len(ranked) > 1 else 0
        if overlaps[best] >= 3 and overlaps[best] >= 2 * runner_up:
            return best
        return None

    def _read(self, leaf: Node, question: str, state: _State) -> None:
        state.tried.add(leaf.id)
        missing = state.missing
        keys = [f"part_{k + 1}" for k in range(len(missing))]
        parts_text = "\n".join(f"{key}: {state.parts[i]}" for key, i in zip(keys, missing, strict=True))
        if len(state.parts) == 1:
            parts_text = f"part_1: {question}"
        background = self.nodes.get(self.parent.get(leaf.id, ""), self.root).meta.summary
        memory = f"\nBackground: {_clip(background, 300)}\n" + self._memory(state)
        prompt = render("read", memory=memory, text=leaf.text[: self.options.leaf_chars], parts=parts_text)
        reply_model = _reply_model(len(keys))
        part_schema = {
            "type": "object",
            "properties": {
                "found": {"type": "boolean"},
                "quote": {"type": "string", "maxLength": 400},
                "answer": {"type": "string", "maxLength": 400},
            },
            "required": ["found", "quote", "answer"],
        }
        schema = {
            "type": "object",
            "properties": {k: part_schema for k in keys},
            "required": keys,
        }
        started = time.monotonic()
        where = ", ".join(f"{s.file}:{s.line_start}-{s.line_end}" for s in leaf.spans)
        step = NavStep(action="read", node_id=leaf.id, source=where, breadcrumb=self._breadcrumb(leaf))
        try:
            result = self.client.structured(
                [_system(), Message(role="user", content=prompt)],
                reply_model,
                schema=schema,
                purpose="read",
                max_tokens=180 + 220 * len(keys),
            )
        except ModelOutputError as exc:
            self._charge(state, exc)
            step.error, step.outcome = str(exc), "no usable reply: treated as no answer"
            self._step(state, step)
            return
        outcomes = []
        for key, i in zip(keys, missing, strict=True):
            part: _PartReply = getattr(result.value, key)
            if not part.found:
                outcomes.append(f"{key}: not in this text")
                continue
            if self.options.verify:
                ok, why = supported(part.quote, part.answer, state.parts[i], leaf.text, whole_question=question)
            else:
                ok, why = bool(part.answer.strip()), "empty answer"
            if ok:
                state.findings[i] = _Finding(i, part.answer.strip(), part.quote.strip(), leaf.id)
                outcomes.append(f"{key}: answered")
            else:
                outcomes.append(f"{key}: rejected, {why}")
                letter = _option_letter(part.answer, question) if is_multiple_choice(question) else None
                if letter:
                    state.votes.setdefault(letter, []).append(leaf.id)
        status = "complete" if not state.missing else ("partial" if state.findings else "none")
        step.outcome = f"{status} ({'; '.join(outcomes)})"
        step.reason = "; ".join(_clip(getattr(result.value, k).answer, 120) for k in keys)
        self._usage_step(state, step, result.usage, result.cached, started)

    # -- the answer ----------------------------------------------------------------------------
    def _finish(self, question: str, state: _State) -> Answer:
        findings = [state.findings[i] for i in sorted(state.findings)]
        citations: list[Citation] = []
        for f in findings:
            leaf = self.nodes[f.node_id]
            span = leaf.spans[0]
            if not any(c.node_id == f.node_id and c.quote == f.quote for c in citations):
                citations.append(
                    Citation(
                        file=span.file,
                        line_start=span.line_start,
                        line_end=span.line_end,
                        node_id=leaf.id,
                        quote=f.quote,
                    )
                )
        parts = [
            {
                "part": p,
                "answer": state.findings[i].answer if i in state.findings else None,
                "node_id": state.findings[i].node_id if i in state.findings else None,
                "quote": state.findings[i].quote if i in state.findings else None,
                "quote_at": _quote_lines(self.nodes, state.findings.get(i)),
            }
            for i, p in enumerate(state.parts)
        ]
        if not findings and state.votes:
            # multiple choice with no verified quote: the option picked most often is a low-confidence
            # answer among the user's own options, reported as partial, never as complete
            order = list(state.votes)  # ties go to the option picked first
            letter = max(order, key=lambda k: (len(state.votes[k]), -order.index(k)))
            leaves = list(dict.fromkeys(state.votes[letter]))
            for leaf_id in leaves:
                span = self.nodes[leaf_id].spans[0]
                citations.append(
                    Citation(
                        file=span.file, line_start=span.line_start, line_end=span.line_end, node_id=leaf_id
                    )
                )
            option = _option_text(question, letter)
            text = f"({letter}) {option}".strip() + (
                f" [unverified: picked in {len(state.votes[letter])} of "
                f"{sum(map(len, state.votes.values()))} leaf readings; no quote from the text confirmed it]"
            )
            return Answer(
                question=question,
                answer=text,
                status="partial",
                citations=citations,
                trace=state.trace,
                usage=state.usage,
                parts=parts,
            )
        if not findings:
            return Answer(
                question=question,
                answer=None,
                status="none",
                trace=state.trace,
                usage=state.usage,
                parts=parts,
            )
        if state.missing:
            missing = "; ".join(state.parts[i] for i in state.missing)
            text = " ".join(f.answer for f in findings) + f" (Not found in the tree: {missing})"
            status = "partial"
        elif len(findings) == 1:
            text, status = findings[0].answer, "complete"
        else:
            text, status = self._combine(question, findings, state), "complete"
        return Answer(
            question=question,
            answer=text,
            status=status,
            citations=citations,
            trace=state.trace,
            usage=state.usage,
            parts=parts,
        )

    def _combine(self, question: str, findings: list[_Finding], state: _State) -> str:
        joined = " ".join(f.answer for f in findings)
        lines = "\n".join(
            f'- {state.parts[f.part]} → {f.answer} (source says: "{_clip(f.quote, 200)}")' for f in findings
        )
        started = time.monotonic()
        step = NavStep(action="combine", outcome=f"{len(findings)} findings")
        try:
            result = self.client.structured(
                [
                    _system(),
                    Message(role="user", content=render("combine", question=question, findings=lines)),
                ],
                _Combined,
                schema={
                    "type": "object",
                    "properties": {"answer": {"type": "string", "maxLength": 800}},
                    "required": ["answer"],
                },
                purpose="combine",
                max_tokens=300,
            )
        except ModelOutputError as exc:
            self._charge(state, exc)
            step.error, step.outcome = str(exc), "kept the findings joined as they are"
            self._step(state, step)
            return joined
        self._usage_step(state, step, result.usage, result.cached, started)
        return result.value.answer.strip()

    # -- helpers -------------------------------------------------------------------------------
    def _breadcrumb(self, node: Node) -> list[str]:
        path = []
        current = node.id
        while current in self.parent:
            current = self.parent[current]
            path.append(current)
        return list(reversed(path))

    @staticmethod
    def _short_meta(node: Node) -> Any:
        m = node.meta
        return m.model_copy(
            update={
                "summary": _clip(m.summary, 300),
                "critical_actions": [_clip(x, 100) for x in m.critical_actions[:3]],
                "decisions": [_clip(x, 100) for x in m.decisions[:3]],
                "noteworthy_events": [_clip(x, 100) for x in m.noteworthy_events[:3]],
                "about": m.about[:12],
                "content_types": m.content_types[:4],
            }
        )

    @staticmethod
    def _option_text(node: Node) -> str:
        m = node.meta
        return " ".join(
            [m.summary, *m.content_types, *m.critical_actions, *m.decisions, *m.noteworthy_events, *m.about]
        )


def _option_letter(answer: str, question: str = "") -> str | None:
    """The option an answer picks: by its letter, else by the option text it repeats."""
    m = re.match(r"\s*\(?([A-D])(?:[).:]|\s*$)", answer) or re.search(
        r"\(([A-D])\)|\boption ([A-D])\b", answer
    )
    if m:
        return next((g for g in m.groups() if g), None)
    said = set(content_words(answer))
    best, score = None, 0.5
    for letter in "ABCD":
        option = set(content_words(_option_text(question, letter)))
        if option and _jaccard(said, option) > score:
            best, score = letter, _jaccard(said, option)
    return best


def _option_text(question: str, letter: str) -> str:
    m = re.search(rf"\(?\b{letter}[).:]\s*(.*?)(?=\s*\(?\b[A-D][).:]\s|\s*Answer with|$)", question, re.S)
    return " ".join(m.group(1).split()) if m else ""


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


_REPLY_MODELS: dict[int, type[BaseModel]] = {}


def _reply_model(k: int) -> type[BaseModel]:
    if k not in _REPLY_MODELS:
        fields: dict[str, Any] = {f"part_{i + 1}": (_PartReply, ...) for i in range(k)}
        _REPLY_MODELS[k] = create_model(f"ReadReply{k}", **fields)
    return _REPLY_MODELS[k]


def _quote_lines(nodes: dict[str, Node], finding: _Finding | None) -> list[int] | None:
    if finding is None:
        return None
    leaf = nodes[finding.node_id]
    where = locate(finding.quote, leaf.text)
    if where is None:
        return None
    span = leaf.spans[0]
    first = span.line_start + leaf.text.count("\n", 0, where[0])
    last = span.line_start + leaf.text.count("\n", 0, where[1])
    return [first, last]
