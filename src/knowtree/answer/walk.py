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

What a walk keeps and the answer made from it (citations, combining parts) are in
`knowtree.answer.walk_result`; the shapes of the model's replies in `knowtree.answer.replies`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from knowtree.answer.evidence import (
    content_words,
    is_multiple_choice,
    lexical_score,
    option_letter,
    supported,
)
from knowtree.answer.parts import split_question
from knowtree.answer.replies import Choice, PartReply, read_reply
from knowtree.answer.walk_result import Finding, WalkRecord, WalkState
from knowtree.errors import ModelOutputError
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import ask, narrowed
from knowtree.prompts.show import format_meta
from knowtree.text import clip
from knowtree.types import Answer, NavStep, Node

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


class Walker(WalkRecord):
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
        state = WalkState(parts=[question])
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
    def _decompose(self, question: str, state: WalkState) -> list[str]:
        if not self.options.verify:  # without verification there are no parts to keep apart
            return [question]
        split = split_question(self.client, question, self.options.max_parts)
        state.usage.add(split.usage)
        if split.step is not None:
            self._step(state, split.step)
        return split.parts

    def _descend(self, node: Node, question: str, state: WalkState) -> Node | None:
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

    def _memory(self, state: WalkState) -> str:
        if not state.findings:
            return ""
        found = "; ".join(clip(f.answer, 160) for f in state.findings.values())
        missing = "; ".join(state.parts[i] for i in state.missing)
        return f"\nAlready found: {found}\nStill missing: {missing}\n"

    def _choose(self, node: Node, options: list[str], question: str, state: WalkState) -> str:
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
                f"Option {i}:\nSummary: {clip(self.nodes[o].meta.summary, 300)}"
                for i, o in enumerate(options)
            )
        here = ""
        if node.id != self.root.id:  # where we are: the collection, then this branch
            here = (
                f"\nCollection: {clip(self.root.meta.summary, 300)}\n"
                f"Current section: {clip(node.meta.summary, 300)}\n"
            )
        n = len(options)

        def in_range(reply: Choice) -> None:
            if not 0 <= reply.choice < n:
                raise ValueError(f"choice must be one of {list(range(n))}, got {reply.choice}")

        started = time.monotonic()
        step = NavStep(action="choose", node_id=node.id, breadcrumb=crumbs, options=options)
        try:
            result = ask(
                self.client,
                narrowed(Choice, choice={"enum": list(range(n))}),
                "choose",
                breadcrumb=here,
                memory=self._memory(state),
                question=question,
                options=shown,
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

    def _read(self, leaf: Node, question: str, state: WalkState) -> None:
        state.tried.add(leaf.id)
        missing = state.missing
        keys = [f"part_{k + 1}" for k in range(len(missing))]
        parts_text = "\n".join(f"{key}: {state.parts[i]}" for key, i in zip(keys, missing, strict=True))
        if len(state.parts) == 1:
            parts_text = f"part_1: {question}"
        background = self.nodes.get(self.parent.get(leaf.id, ""), self.root).meta.summary
        memory = f"\nBackground: {clip(background, 300)}\n" + self._memory(state)
        started = time.monotonic()
        where = ", ".join(f"{s.file}:{s.line_start}-{s.line_end}" for s in leaf.spans)
        step = NavStep(action="read", node_id=leaf.id, source=where, breadcrumb=self._breadcrumb(leaf))
        try:
            result = ask(
                self.client,
                read_reply(len(keys)),
                "read",
                memory=memory,
                text=leaf.text[: self.options.leaf_chars],
                parts=parts_text,
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
            part: PartReply = getattr(result.value, key)
            if not part.found:
                outcomes.append(f"{key}: not in this text")
                continue
            if self.options.verify:
                ok, why = supported(
                    part.quote, part.answer, state.parts[i], leaf.text, whole_question=question
                )
            else:
                ok, why = bool(part.answer.strip()), "empty answer"
            if ok:
                state.findings[i] = Finding(i, part.answer.strip(), part.quote.strip(), leaf.id)
                outcomes.append(f"{key}: answered")
            else:
                outcomes.append(f"{key}: rejected, {why}")
                letter = option_letter(part.answer, question) if is_multiple_choice(question) else None
                if letter:
                    state.votes.setdefault(letter, []).append(leaf.id)
        status = "complete" if not state.missing else ("partial" if state.findings else "none")
        step.outcome = f"{status} ({'; '.join(outcomes)})"
        step.reason = "; ".join(clip(getattr(result.value, k).answer, 120) for k in keys)
        self._usage_step(state, step, result.usage, result.cached, started)

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
                "summary": clip(m.summary, 300),
                "critical_actions": [clip(x, 100) for x in m.critical_actions[:3]],
                "decisions": [clip(x, 100) for x in m.decisions[:3]],
                "noteworthy_events": [clip(x, 100) for x in m.noteworthy_events[:3]],
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
