"""What a walk keeps (`WalkState`: parts, findings, what was tried, the trace) and the answer made from it.

`WalkRecord` is the walker's bookkeeping half: recording steps and their cost, and, at the end,
turning the verified findings into an answer with citations (one more model call only when several
parts were found and must be combined into one answer).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from knowtree.answer.evidence import locate, option_text
from knowtree.answer.parts import not_found
from knowtree.answer.replies import Combined
from knowtree.answer.search import cite, cited_once
from knowtree.errors import ModelOutputError
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import ask
from knowtree.text import clip
from knowtree.types import Answer, NavStep, Node, Usage


@dataclass
class Finding:
    part: int
    answer: str
    quote: str
    node_id: str


@dataclass
class WalkState:
    parts: list[str]
    findings: dict[int, Finding] = field(default_factory=dict)
    tried: set[str] = field(default_factory=set)  # leaves read
    dead: set[str] = field(default_factory=set)  # inner nodes with nothing left to try
    # multiple choice: options picked in leaves whose evidence did not verify, with the leaf ids
    votes: dict[str, list[str]] = field(default_factory=dict)
    trace: list[NavStep] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    @property
    def missing(self) -> list[int]:
        return [i for i in range(len(self.parts)) if i not in self.findings]


class WalkRecord:
    """Steps, their cost, and the final answer; mixed into `Walker`, which sets these attributes."""

    nodes: dict[str, Node]
    client: LLMClient
    on_step: Callable[[NavStep], None] | None

    def _step(self, state: WalkState, step: NavStep) -> None:
        state.trace.append(step)
        if self.on_step:
            self.on_step(step)

    @staticmethod
    def _charge(state: WalkState, exc: ModelOutputError) -> None:
        """Failed attempts cost tokens too: count them in the answer's usage."""
        if isinstance(exc.usage, Usage):
            state.usage.add(exc.usage)

    def _usage_step(
        self, state: WalkState, step: NavStep, usage: Usage, cached: bool, started: float
    ) -> None:
        step.tokens = usage.input_tokens + usage.output_tokens
        step.cached = cached
        step.latency_s = round(time.monotonic() - started, 3)
        state.usage.add(usage)
        self._step(state, step)

    # -- the answer ----------------------------------------------------------------------------
    def _finish(self, question: str, state: WalkState) -> Answer:
        findings = [state.findings[i] for i in sorted(state.findings)]
        # each finding cites the quote's own lines (and page), as the index modes do
        citations = cited_once(cite(self.nodes[f.node_id], f.quote) for f in findings)
        parts = [
            {
                "part": p,
                "answer": state.findings[i].answer if i in state.findings else None,
                "node_id": state.findings[i].node_id if i in state.findings else None,
                "quote": state.findings[i].quote if i in state.findings else None,
                "quote_at": quote_lines(self.nodes, state.findings.get(i)),
            }
            for i, p in enumerate(state.parts)
        ]
        if not findings and state.votes:
            # multiple choice with no verified quote: the option picked most often is a low-confidence
            # answer among the user's own options, reported as partial, never as complete
            order = list(state.votes)  # ties go to the option picked first
            letter = max(order, key=lambda k: (len(state.votes[k]), -order.index(k)))
            leaves = list(dict.fromkeys(state.votes[letter]))
            citations += [cite(self.nodes[leaf_id], "") for leaf_id in leaves]  # no quote: the leaf's span
            option = option_text(question, letter)
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
            text = " ".join(f.answer for f in findings) + not_found([state.parts[i] for i in state.missing])
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

    def _combine(self, question: str, findings: list[Finding], state: WalkState) -> str:
        joined = " ".join(f.answer for f in findings)
        lines = "\n".join(
            f'- {state.parts[f.part]} → {f.answer} (source says: "{clip(f.quote, 200)}")' for f in findings
        )
        started = time.monotonic()
        step = NavStep(action="combine", outcome=f"{len(findings)} findings")
        try:
            result = ask(
                self.client,
                Combined,
                "combine",
                question=question,
                findings=lines,
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


def quote_lines(nodes: dict[str, Node], finding: Finding | None) -> list[int] | None:
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
