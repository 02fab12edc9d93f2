"""Tree search: one call over the compact outline picks sections, their text is read within a budget.

1. The outline (numbered nodes: title, pages, summary when there is one; no text) goes to the model
   in one call, which returns `{thinking, node_list}` (constrained to the numbers shown).
   When the outline would not fit the model's context, it is shown level by level: the top levels
   first, then the children of the chosen nodes, a bounded number of rounds.
2. The leaves under the chosen nodes, in order of choice, are read until `budget_tokens` is spent;
   a chosen section larger than the budget is read best parts first (BM25 against the question).
   Parts of a split section are shown in the outline by their opening words, not their repeated title.
3. One answer call over those sources returns a quote and an answer; the quote must be found in a
   source and the answer grounded there (`evidence.supported`), else the answer is not "complete".
   Citations name the file and the physical page(s) the quote is on.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import StrictBool, StrictInt

from knowtree.answer.evidence import placed, supported
from knowtree.errors import ModelOutputError
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import Reply, ask, narrowed, string
from knowtree.retrieve.bm25 import bm25_scores
from knowtree.text import clip
from knowtree.types import Answer, Citation, NavStep, Node, Usage

CHARS_PER_TOKEN = 4


@dataclass
class SearchOptions:
    budget_tokens: int = 3000  # section text read for the answer
    max_nodes: int = 4  # sections one search call may pick
    outline_tokens: int = 3000  # an outline larger than this is shown level by level
    max_rounds: int = 3  # level-by-level rounds
    summary_chars: int = 160
    expert: list[str] = field(default_factory=list)  # expert notes selected for this question
    answer: bool = True  # False: retrieval only (benchmarks), no answer call


class SearchReply(Reply):
    """The selection reply. `node_list` is required and holds real integers (`true` is not option 1):
    a garbled reply is repaired or fails as `ModelOutputError`, never read as "select nothing"."""

    thinking: str = string(300)
    node_list: list[StrictInt]


class SourceAnswer(Reply):
    """The answer reply: every field required, `found` a real boolean and `source` a real integer."""

    found: StrictBool
    source: StrictInt
    quote: str = string(400, ...)
    answer: str = string(400, ...)


@dataclass
class Retrieved:
    """What a search read: the leaves, in reading order, and their physical pages per file."""

    leaves: list[str] = field(default_factory=list)
    chars: int = 0

    def pages(self, nodes: dict[str, Node]) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for leaf in self.leaves:
            for s in nodes[leaf].spans:
                if s.page_start is not None and s.page_end is not None:
                    out.extend((s.file, p) for p in range(s.page_start, s.page_end + 1))
        return list(dict.fromkeys(out))


def _pages(node: Node) -> str:
    spans = [s for s in node.spans if s.page_start is not None]
    if not spans:
        if node.spans:
            s = node.spans[0]
            return f"lines {s.line_start}-{s.line_end}"
        return ""
    a = min(s.page_start for s in spans)  # type: ignore[type-var]
    b = max(s.page_end or s.page_start for s in spans)  # type: ignore[type-var]
    return f"p. {a}" if a == b else f"pp. {a}-{b}"


def _title(node: Node) -> str:
    return node.meta.title or (" ".join(node.meta.summary.split())[:80] or node.id)


class TreeSearch:
    def __init__(
        self,
        nodes: dict[str, Node],
        client: LLMClient,
        options: SearchOptions | None = None,
        on_step: Any = None,
    ) -> None:
        self.nodes = nodes
        self.client = client
        self.options = options or SearchOptions()
        self.on_step = on_step
        self.trace: list[NavStep] = []
        self.usage = Usage()
        self.openings = Openings(nodes)
        self.question = ""

    # -- public --------------------------------------------------------------------------------
    def ask(self, question: str, scope: list[str]) -> Answer:
        """Answer from the subtrees under `scope` (the root, or the documents chosen in a collection)."""
        question = question.strip()
        self.question = question
        chosen = self.select(question, scope)
        got = self.gather(chosen)
        if not self.options.answer:  # retrieval only: the trace says what would have been read
            where = "; ".join(_pages(self.nodes[leaf]) for leaf in got.leaves)
            self._step(
                NavStep(action="read", source=where, options=list(got.leaves), outcome="retrieval only")
            )
            return Answer(question=question, answer=None, status="none", trace=self.trace, usage=self.usage)
        return self.answer(question, got)

    def _step(self, step: NavStep) -> None:
        self.trace.append(step)
        if self.on_step:
            self.on_step(step)

    def _charge(self, exc: ModelOutputError) -> None:
        if isinstance(exc.usage, Usage):
            self.usage.add(exc.usage)

    # -- 1. select -----------------------------------------------------------------------------
    def outline(self, tops: list[str], max_depth: int | None) -> list[tuple[str, int]]:
        """(node id, depth) in reading order below `tops`, down to `max_depth` levels."""
        out: list[tuple[str, int]] = []

        def walk(nid: str, depth: int) -> None:
            out.append((nid, depth))
            node = self.nodes[nid]
            if max_depth is not None and depth >= max_depth:
                return
            for c in node.children:
                walk(c, depth + 1)

        for t in tops:
            walk(t, 0)
        return out

    def _line(self, i: int, nid: str, depth: int) -> str:
        node = self.nodes[nid]
        line = f"{'  ' * depth}[{i}] {clip(self.openings.title(node), 100)} ({_pages(node)})"
        if node.meta.summary and node.meta.title:
            line += f": {clip(node.meta.summary, self.options.summary_chars)}"
        return line

    def _fit_depth(self, tops: list[str]) -> int | None:
        """The deepest outline that fits the outline budget (None: all of it; at least the tops)."""
        budget = self.options.outline_tokens * CHARS_PER_TOKEN
        total = len(self.outline(tops, None))
        for depth in range(32):
            rows = self.outline(tops, depth)
            if sum(len(self._line(i, n, d)) + 1 for i, (n, d) in enumerate(rows)) > budget:
                return max(0, depth - 1)
            if len(rows) == total:
                return None
        return None

    def select(self, question: str, scope: list[str]) -> list[str]:
        # a single scope node's own line says nothing: show what is below it
        tops = list(scope)
        while len(tops) == 1 and self.nodes[tops[0]].children:
            tops = list(self.nodes[tops[0]].children)
        chosen: list[str] = []
        for _round in range(self.options.max_rounds):
            depth = self._fit_depth(tops)
            rows = self.outline(tops, depth)
            picked = self._search_call(question, rows, partial=depth is not None)
            if not picked:
                break
            # nodes whose children were not shown are opened in the next round
            closed = [
                n
                for n in picked
                if self.nodes[n].children and depth is not None and dict(rows).get(n) == depth
            ]
            chosen.extend(n for n in picked if n not in closed)
            if not closed:
                break
            tops = [c for n in closed for c in self.nodes[n].children]
        else:
            chosen.extend(tops[: self.options.max_nodes])
        return list(dict.fromkeys(chosen))

    def _search_call(self, question: str, rows: list[tuple[str, int]], *, partial: bool) -> list[str]:
        shown = "\n".join(self._line(i, n, d) for i, (n, d) in enumerate(rows))
        has_summaries = any(self.nodes[n].meta.summary for n, _ in rows)
        expert = ""
        if self.options.expert:
            expert = "Expert advice for this kind of question: " + " ".join(self.options.expert) + "\n"
        n = len(rows)

        def in_range(reply: SearchReply) -> None:
            bad = [i for i in reply.node_list if not 0 <= i < n]
            if bad:
                raise ValueError(f"node_list holds numbers not in the outline: {bad}")

        started = time.monotonic()
        step = NavStep(action="choose", options=[r[0] for r in rows])
        try:
            result = ask(
                self.client,
                narrowed(
                    SearchReply,
                    node_list={
                        "maxItems": self.options.max_nodes,
                        "items": {"type": "integer", "enum": list(range(n))},
                    },
                ),
                "tree_search",
                summaries_note=" and summaries" if has_summaries else "",
                max_nodes=self.options.max_nodes,
                expert=expert,
                question=question,
                outline=shown,
                purpose="search",
                max_tokens=220,
                check=in_range,
            )
        except ModelOutputError as exc:
            self._charge(exc)
            # recorded, not hidden: fall back to the sections sharing most words with the question
            from knowtree.answer.evidence import lexical_score

            ranked = sorted(
                range(n),
                key=lambda i: (
                    -lexical_score(
                        question, _title(self.nodes[rows[i][0]]) + " " + self.nodes[rows[i][0]].meta.summary
                    )
                ),
            )
            picked = [rows[i][0] for i in ranked[: self.options.max_nodes]]
            step.error = str(exc)
            step.reason = "fallback: most question words in the titles"
            step.outcome = "selected: " + "; ".join(_title(self.nodes[p]) for p in picked)
            self._step(step)
            return picked
        picked = [rows[i][0] for i in dict.fromkeys(result.value.node_list)][: self.options.max_nodes]
        step.reason = result.value.thinking
        step.choice = picked[0] if picked else None
        step.outcome = (
            ("level by level; " if partial else "")
            + "selected: "
            + ("; ".join(f"{_title(self.nodes[p])} ({_pages(self.nodes[p])})" for p in picked) or "nothing")
        )
        step.tokens = result.usage.input_tokens + result.usage.output_tokens
        step.cached = result.cached
        step.latency_s = round(time.monotonic() - started, 3)
        self.usage.add(result.usage)
        self._step(step)
        return picked

    # -- 2. gather -----------------------------------------------------------------------------
    def leaves_under(self, nid: str) -> list[str]:
        node = self.nodes[nid]
        if node.is_leaf:
            return [nid]
        return [leaf for c in node.children for leaf in self.leaves_under(c)]

    def gather(self, chosen: list[str]) -> Retrieved:
        budget = self.options.budget_tokens * CHARS_PER_TOKEN
        got = Retrieved()
        # breadth over depth: the first leaf of every chosen section before the second of any
        queues = [self._ranked(self.leaves_under(c), budget) for c in chosen]
        order: list[str] = []
        while any(queues):
            for q in queues:
                if q:
                    order.append(q.pop(0))
        for leaf in dict.fromkeys(order):
            size = len(self.nodes[leaf].text)
            if got.leaves and got.chars + size > budget:
                continue
            got.leaves.append(leaf)
            got.chars += min(size, budget)
        return got

    def _ranked(self, leaves: list[str], budget: int) -> list[str]:
        """A chosen section larger than the budget is read best parts first: its leaves ranked by
        BM25 against the question (reading order among equals); a section that fits is read in order."""
        if sum(len(self.nodes[leaf].text) for leaf in leaves) <= budget or not self.question:
            return list(leaves)
        scores = bm25_scores(self.question, [self.nodes[leaf].text for leaf in leaves])
        return [leaves[i] for i in sorted(range(len(leaves)), key=lambda i: -scores[i])]

    # -- 3. answer -----------------------------------------------------------------------------
    def answer(self, question: str, got: Retrieved) -> Answer:
        if not got.leaves:
            return Answer(question=question, answer=None, status="none", trace=self.trace, usage=self.usage)
        budget = self.options.budget_tokens * CHARS_PER_TOKEN
        blocks = []
        for i, leaf in enumerate(got.leaves, 1):
            node = self.nodes[leaf]
            file = node.spans[0].file if node.spans else ""
            text = node.text[:budget]
            blocks.append(
                f"[{i}] {file}, {_pages(node)}, {clip(_title(node), 80)}\n<source>\n{text}\n</source>"
            )
        k = len(got.leaves)
        started = time.monotonic()
        where = "; ".join(f"[{i}] {_pages(self.nodes[leaf])}" for i, leaf in enumerate(got.leaves, 1))
        step = NavStep(action="read", source=where, options=list(got.leaves))
        try:
            result = ask(
                self.client,
                narrowed(SourceAnswer, source={"enum": list(range(1, k + 1))}),
                "search_answer",
                sources="\n\n".join(blocks),
                question=question,
                purpose="search_answer",
                max_tokens=400,
            )
        except ModelOutputError as exc:
            self._charge(exc)
            step.error, step.outcome = str(exc), "no usable reply: treated as no answer"
            self._step(step)
            return Answer(question=question, answer=None, status="none", trace=self.trace, usage=self.usage)
        reply = result.value
        step.tokens = result.usage.input_tokens + result.usage.output_tokens
        step.cached = result.cached
        step.latency_s = round(time.monotonic() - started, 3)
        self.usage.add(result.usage)
        if not reply.found or not reply.answer.strip():
            step.outcome = "none: the sources do not answer it"
            self._step(step)
            return Answer(question=question, answer=None, status="none", trace=self.trace, usage=self.usage)
        # the quote must be in a source (the one named first), the answer grounded there
        named = reply.source - 1 if 1 <= reply.source <= k else 0
        order = [named] + [i for i in range(k) if i != named]
        why = ""
        for i in order:
            leaf = self.nodes[got.leaves[i]]
            ok, why_i = supported(reply.quote, reply.answer, question, leaf.text)
            if ok:
                step.node_id, step.choice = leaf.id, leaf.id
                step.reason = clip(reply.answer, 120)
                step.outcome = f"complete (source {i + 1}, {_pages(leaf)})"
                self._step(step)
                citation = cite(leaf, reply.quote)
                return Answer(
                    question=question,
                    answer=reply.answer.strip(),
                    status="complete",
                    citations=[citation],
                    trace=self.trace,
                    usage=self.usage,
                    parts=[
                        {
                            "part": question,
                            "answer": reply.answer.strip(),
                            "node_id": leaf.id,
                            "quote": reply.quote,
                        }
                    ],
                )
            if i == named:
                why = why_i
        # an answer whose evidence did not verify is reported as such, never as complete
        step.outcome = f"rejected: {why}"
        step.reason = clip(reply.answer, 120)
        self._step(step)
        leaf = self.nodes[got.leaves[named]]
        return Answer(
            question=question,
            answer=f"{reply.answer.strip()} [unverified: {why}]",
            status="partial",
            citations=[cite(leaf, "")],
            trace=self.trace,
            usage=self.usage,
        )


_PART = re.compile(r"\((part \d+/\d+)[,)]")


class Openings:
    """How a navigator is shown a part of a split section: its part number and opening words
    (past a running header, a first line most pages share) instead of the section's title again."""

    def __init__(self, nodes: dict[str, Node]) -> None:
        self.nodes = nodes
        self._header: str | None = None

    def title(self, node: Node) -> str:
        title = _title(node)
        m = _PART.search(title)
        if node.is_leaf and m and not node.meta.summary:
            return f"{m.group(1)}: {self.opening(node)}"
        return title

    def opening(self, node: Node) -> str:
        if self._header is None:
            firsts = Counter(_first_line(n.text) for n in self.nodes.values() if n.is_leaf and n.text)
            line, count = firsts.most_common(1)[0] if firsts else ("", 0)
            self._header = line if count >= 3 and count >= 0.3 * sum(firsts.values()) else ""
        lines = [ln.strip() for ln in node.text.splitlines() if ln.strip() and ln.strip() != "\f"]
        if lines and self._header and lines[0] == self._header:
            lines = lines[1:]
        return clip(" ".join(lines), 70)


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip() and ln.strip() != "\f"), "")


def cited_once(citations: Iterable[Citation]) -> list[Citation]:
    """The citations in order, each (node, quote) once: the first citation of it kept."""
    seen: set[tuple[str, str]] = set()
    out: list[Citation] = []
    for c in citations:
        if (c.node_id, c.quote) not in seen:
            seen.add((c.node_id, c.quote))
            out.append(c)
    return out


def cite(leaf: Node, quote: str) -> Citation:
    """A citation naming the file, lines and physical page(s); the quote's own page when found."""
    span = leaf.spans[0]
    p0, p1 = span.page_start, span.page_end
    line_start, line_end = span.line_start, span.line_end
    at = placed(quote, leaf.text) if quote else None  # verbatim, else where it verified
    if at is not None:
        line_start = span.line_start + leaf.text.count("\n", 0, at[0])
        line_end = span.line_start + leaf.text.count("\n", 0, at[1])
        if p0 is not None:
            # pages are separated by a form feed in the stored text
            p0 = span.page_start + leaf.text.count("\f", 0, at[0])  # type: ignore[operator]
            p1 = span.page_start + leaf.text.count("\f", 0, at[1])  # type: ignore[operator]
    return Citation(
        file=span.file,
        line_start=line_start,
        line_end=line_end,
        node_id=leaf.id,
        quote=quote,
        page_start=p0,
        page_end=p1,
    )
