"""`--mode retrieve`: the tree as an index finds the evidence (no model), one answer call reads it.

The evidence (`Tree.retrieve`: best pieces within the budget, neighbours merged, document order)
is shown to the model as numbered sources through tree search's answer step, so the quote is
verified against the evidence text and the answer grounded there exactly as in `--mode search`:
an unverifiable answer is partial, never complete. Citations name the leaf, its lines, pages or
message positions. Works for every tree kind (chunk trees, section trees, collections, memories).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from knowtree.answer.parts import Split, not_found, split_question
from knowtree.answer.search import Retrieved, SearchOptions, TreeSearch, cite, cited_once
from knowtree.text import QUOTE_MATCH, quote_score
from knowtree.types import Answer, Citation, NavStep, Node, NodeKind, NodeMeta, Span, Usage

if TYPE_CHECKING:
    from knowtree.llm.client import LLMClient
    from knowtree.retrieve.treesearch import Evidence


DEFAULT_BUDGET = 2048
MIN_PART_BUDGET = 256  # tokens of evidence a part of a question gets at least


def piece_leaf(piece_id: str) -> str:
    """The id of the leaf an index piece was cut from (a piece's id is its leaf's id, ':', its number)."""
    return piece_id.rsplit(":", 1)[0]


def item_leaf_ids(ev: Evidence) -> list[str]:
    """The ids of the leaves an evidence item's pieces come from, in order, each once."""
    return list(dict.fromkeys(piece_leaf(p) for p in ev.pieces))


def evidence_node_ids(evidence: Sequence[Evidence]) -> list[str]:
    """Every node id the answer step reads for `evidence`: each item's node and the leaves its
    pieces come from, each once (what a caller loads instead of the whole tree)."""
    return list(dict.fromkeys(i for ev in evidence for i in (ev.node_id, *item_leaf_ids(ev))))


def item_leaves(ev: Evidence, tree_nodes: dict[str, Node]) -> list[Node]:
    """The leaves an evidence item's pieces come from, in order, each once."""
    return [tree_nodes[i] for i in item_leaf_ids(ev) if i in tree_nodes]


def evidence_nodes(tree_nodes: dict[str, Node], evidence: Sequence[Evidence]) -> dict[str, Node]:
    """One node per evidence item, holding just the evidence text, with the span it was cut from."""
    out: dict[str, Node] = {}
    for i, ev in enumerate(evidence, 1):
        leaf = tree_nodes.get(ev.node_id)
        c = ev.citation
        span = Span(
            file=c.file,
            start=0,
            end=len(ev.text),
            line_start=c.line_start,
            line_end=c.line_end,
            page_start=c.page_start,
            page_end=c.page_end,
        )
        meta = leaf.meta.model_copy() if leaf is not None else NodeMeta()
        # neighbouring leaves merged into one item: the reader sees every section it holds
        titles = list(dict.fromkeys(n.meta.title for n in item_leaves(ev, tree_nodes) if n.meta.title))
        if len(titles) > 1:
            meta.title = " / ".join(titles)
        out[f"{ev.node_id}#e{i}"] = Node(
            id=f"{ev.node_id}#e{i}",
            kind=NodeKind.LEAF,
            level=0,
            meta=meta,
            text=ev.text,
            spans=[span],
        )
    return out


def answer_over_evidence(
    tree_nodes: dict[str, Node],
    evidence: Sequence[Evidence],
    question: str,
    client: LLMClient,
    budget: int,
    on_step: Callable[[NavStep], None] | None = None,
) -> Answer:
    """One quote-verified answer call over packed evidence (tree search's answer step), citing the
    real leaves rather than the evidence views of them."""
    nodes = evidence_nodes(tree_nodes, evidence)
    searcher = TreeSearch(nodes, client, SearchOptions(budget_tokens=budget, answer=True), on_step=on_step)
    got = Retrieved(leaves=list(nodes), chars=sum(len(n.text) for n in nodes.values()))
    answer = searcher.answer(question.strip(), got)
    items = {f"{ev.node_id}#e{i}": ev for i, ev in enumerate(evidence, 1)}
    answer.citations = [pinpoint(c, items.get(c.node_id), tree_nodes) for c in answer.citations]
    for step in answer.trace:  # the answer step names the quote's leaf and place, not the item's
        if step.choice in items and answer.status == "complete" and answer.citations:
            c = answer.citations[0]
            step.node_id = c.node_id  # the choice stays the source picked among the options shown
            source = (step.outcome or "").partition(",")[0]  # "complete (source 2"
            step.outcome = f"{source}, {place(c)})"
    for part in answer.parts:
        if isinstance(part.get("node_id"), str):
            part["node_id"] = part["node_id"].split("#e", 1)[0]
    return answer


def pinpoint(citation: Citation, ev: Evidence | None, tree_nodes: dict[str, Node]) -> Citation:
    """The citation of a quote found in an evidence item, narrowed from the item (neighbouring pieces,
    possibly of several leaves: pages 1-4) to the leaf that holds the quote, with the quote's own lines
    and page (`search.cite`). A quote no single leaf holds keeps the item's citation."""
    citation.node_id = citation.node_id.split("#e", 1)[0]
    if ev is None or not citation.quote:
        return citation
    scored = [(quote_score(citation.quote, n.text), n) for n in item_leaves(ev, tree_nodes) if n.spans]
    if scored:  # the leaf that holds the quote: verbatim, else where it verified (most of its words)
        score, leaf = max(scored, key=lambda x: x[0])
        if score >= QUOTE_MATCH:
            exact = cite(leaf, citation.quote)
            exact.timestamp = citation.timestamp or ev.citation.timestamp
            return exact
    return citation


def place(c: Citation) -> str:
    """Where a citation points: "report.pdf, p. 5" / "pp. 5-6", else "notes.md:26-28"."""
    if c.page_start is not None:
        pages = f"p. {c.page_start}" if c.page_end in (None, c.page_start) else f"pp. {c.page_start}-{c.page_end}"
        return f"{c.file}, {pages}"
    return f"{c.file}:{c.line_start}" + (f"-{c.line_end}" if c.line_end != c.line_start else "")


def evidence_step(node_id: str | None, evidence: Sequence[Evidence], judged: bool = False) -> NavStep:
    """The trace's record of what the index found (no model call; `judged`: packed after the judged
    beam of `--mode nav`): the leaves, items and tokens."""
    items = f"{len(evidence)} evidence item(s), {sum(ev.tokens for ev in evidence)} tokens"
    return NavStep(
        action="read",
        node_id=node_id,
        options=[ev.node_id for ev in evidence],
        outcome=f"nav: {items}" if judged else f"retrieve: {items}, found without a model call",
    )


def answer_from_evidence(
    tree_nodes: dict[str, Node],
    root_id: str | None,
    evidence: Sequence[Evidence],
    question: str,
    client: LLMClient,
    budget: int,
    on_step: Callable[[NavStep], None] | None = None,
) -> Answer:
    """`--mode retrieve` after retrieval: the evidence the index found (no model) as the first step
    of the trace, then one answer call over it, quote verified."""
    first = evidence_step(root_id, evidence)
    if on_step:
        on_step(first)
    answer = answer_over_evidence(tree_nodes, evidence, question, client, budget, on_step)
    answer.trace = [first, *answer.trace]
    return answer


def by_parts(
    question: str,
    client: LLMClient,
    budget: int,
    answer_part: Callable[[str, int], Answer],
    on_step: Callable[[NavStep], None] | None = None,
) -> Answer:
    """Any question through the index modes: split into the facts it asks for (the walk's rule, so a
    simple question stays whole without a model call), each part answered by `answer_part(text,
    budget)` with its share of the budget. The answer joins the parts' answers and citations; it is
    complete only when every part is, none when no part is."""
    split = split_question(client, question.strip())
    if split.step is not None and on_step:
        on_step(split.step)
    share = budget if len(split.parts) == 1 else max(MIN_PART_BUDGET, budget // len(split.parts))
    return joined(question, split, [answer_part(part, share) for part in split.parts])


def answer_by_parts(
    read_nodes: Callable[[Sequence[Evidence]], dict[str, Node]],
    root_id: str | None,
    question: str,
    client: LLMClient,
    budget: int,
    retrieve: Callable[[str, int], Sequence[Evidence]],
    on_step: Callable[[NavStep], None] | None = None,
) -> Answer:
    """`--mode retrieve`: `by_parts`, each part's evidence found by `retrieve(text, budget)` (no
    model) and answered in one call with its own verified quote. `read_nodes(evidence)`: the tree's
    nodes the answer step needs for that evidence (at least `evidence_node_ids`)."""

    def answer_part(part: str, share: int) -> Answer:
        evidence = retrieve(part, share)
        return answer_from_evidence(read_nodes(evidence), root_id, evidence, part, client, share, on_step)

    return by_parts(question, client, budget, answer_part, on_step)


def joined(question: str, split: Split, answers: Sequence[Answer]) -> Answer:
    """One answer from the parts' answers (a single part's answer as it is, with the split's cost)."""
    usage = Usage()
    usage.add(split.usage)
    for a in answers:
        usage.add(a.usage)
    trace = ([split.step] if split.step is not None else []) + [s for a in answers for s in a.trace]
    if len(answers) == 1:
        return answers[0].model_copy(update={"question": question, "trace": trace, "usage": usage})
    found = [a for a in answers if a.answer]
    missing = [p for p, a in zip(split.parts, answers, strict=True) if not a.answer]
    text = ""
    for a in found:  # terse answers ("PostgreSQL") kept apart; sentences follow one another
        said = (a.answer or "").strip()
        text += ("" if not text else " " if text[-1] in ".!?" else "; ") + said
    text = text or None
    if text and missing:
        text += not_found(missing)
    statuses = {a.status for a in answers}
    status = "complete" if statuses == {"complete"} else ("partial" if found else "none")
    citations = cited_once(c for a in answers for c in a.citations)
    parts = [
        {"part": p, "status": a.status, "answer": a.answer, **(a.parts[0] if a.parts else {}), "part_of": question}
        for p, a in zip(split.parts, answers, strict=True)
    ]
    return Answer(
        question=question, answer=text, status=status, citations=citations, trace=trace, usage=usage, parts=parts
    )


def render_evidence(evidence: Sequence[Evidence]) -> str:
    """Evidence as text: one block per item with its score and citation."""
    if not evidence:
        return "no evidence found"
    blocks = []
    for i, ev in enumerate(evidence, 1):
        c = ev.citation
        where = place(c)
        if c.timestamp:
            where += f" ({c.timestamp})"
        blocks.append(f"[{i}] {where}  score {ev.score:.3f}  node {ev.node_id[:12]}\n{ev.text.rstrip()}")
    return "\n\n".join(blocks)
