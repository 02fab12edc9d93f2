"""Answering on structured trees and collections: the documents, the expert notes, then search or walk.

* `walk`: the walker (choose, read, verify, backtrack) over section titles and whatever metadata
  the nodes have; nodes without a summary get one the first time they are shown when the tree was
  built with `summaries="lazy"` (the facade's `summarize` callback keeps it, so it is paid once).
* `search`: `answer.search.TreeSearch`, one call over the outline.
* `retrieve` (what `auto` does per document): the tree's index, scoped to the document, finds the
  evidence with no model call and one call per part of the question answers (`answer.indexed`).
* `auto`: retrieve, unless expert notes match the question (only search and walk read them): then
  search for trees built from a document's structure whose outline fits in half the model's
  context window (level-by-level search otherwise costs a few calls, still fewer than a walk);
  walk for chunk-based trees, which have no titles to search (`answer.router.pick_mode`).

In a collection (several documents), the documents are chosen first (`answer.collection`), then
read one by one until one answers. Which plan runs is `answer.router`'s decision;
this module gets the nodes, a client and what the facade read from the store (`StructuredAsk`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from knowtree.answer.indexed import DEFAULT_BUDGET, answer_by_parts, evidence_step
from knowtree.answer.router import pick_mode
from knowtree.answer.search import Openings, SearchOptions, TreeSearch
from knowtree.answer.walk import EventSink, Walker, WalkOptions, WalkState
from knowtree.types import Answer, NavStep, Node, NodeMeta, Usage


def is_structured(nodes: dict[str, Node], root_id: str) -> bool:
    return bool(nodes[root_id].meta.title)


def outline_tokens(nodes: dict[str, Node], top: str) -> int:
    """About how many tokens the outline below `top` takes (a line per node: title, pages, summary)."""
    total, stack = 0, [top]
    while stack:
        n = nodes[stack.pop()]
        total += len(n.meta.title) + 24 + min(len(n.meta.summary), 160)
        stack.extend(n.children)
    return total // 4


def expert_notes(notes: Sequence[str], question: str, limit: int = 3) -> list[str]:
    """The expert notes (of this tree and '*' notes, as the facade read them) that match the
    question: by shared words, else by embedding similarity when the embedding extra is installed."""
    from knowtree.answer.evidence import content_words
    from knowtree.text import stem

    if not notes:
        return []
    asked = {stem(w) for w in content_words(question)}
    scored = []
    for n in notes:
        shared = len(asked & {stem(w) for w in content_words(n)})
        scored.append((shared, n))
    picked = [t for s, t in sorted(scored, key=lambda x: -x[0]) if s > 0][:limit]
    if picked:
        return picked
    try:
        from knowtree.retrieve.embed import get_embedder

        emb = get_embedder()
        vecs = emb.embed([question, *notes])
    except Exception:  # no embedding extra: keyword matching only
        return []
    sims = vecs[1:] @ vecs[0]
    ranked = sorted(range(len(notes)), key=lambda i: -float(sims[i]))
    return [notes[i] for i in ranked if float(sims[i]) >= 0.45][:limit]


class StructuredWalker(Walker):
    """The walker, with expert notes in its prompts and lazy metadata for the options it shows."""

    def __init__(
        self,
        *args: Any,
        expert: list[str] | None = None,
        prepare: Callable[[list[str]], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.expert = expert or []
        self.prepare = prepare
        self.openings = Openings(self.nodes)

    def _short_meta(self, node: Node) -> Any:  # type: ignore[override]
        meta = Walker._short_meta(node)
        return meta.model_copy(update={"title": self.openings.title(node)}) if meta.title else meta

    def _memory(self, state: WalkState) -> str:
        base = super()._memory(state)
        if not self.expert:
            return base
        return "\nExpert advice: " + " ".join(self.expert) + "\n" + base

    def _choose(self, node: Node, options: list[str], question: str, state: WalkState) -> str:
        if self.prepare is not None and len(options) > 1:
            self.prepare(options)
        return super()._choose(node, options, question, state)

    @staticmethod
    def _option_text(node: Node) -> str:
        return node.meta.title + " " + Walker._option_text(node)

    def _descend(self, node: Node, question: str, state: WalkState) -> Node | None:
        """As the walker's, for trees where a section holds both leaves (its introduction) and
        subsections: a leaf chosen among sections is read on its own, through a one-leaf view of
        its section (its own id, so finishing it does not close the real section)."""
        while True:
            if node.id in state.dead or node.is_leaf:
                return None
            kids = [c for c in node.children if c not in state.dead and c not in state.tried]
            if not kids:
                state.dead.add(node.id)
                return None
            if all(self.nodes[k].is_leaf for k in kids):
                if len(kids) == len([c for c in node.children if c not in state.tried]):
                    return node
                # the subsections are finished: a view holding only the leaves left to read
                return node.model_copy(update={"id": f"{node.id}#leaves", "children": kids})
            child = self._choose(node, kids, question, state)
            if self.nodes[child].is_leaf:
                return node.model_copy(update={"id": f"{node.id}#{child}", "children": [child]})
            found = self._descend(self.nodes[child], question, state)
            if found is not None:
                return found


@dataclass(slots=True)
class StructuredAsk:
    """What a structured question needs beyond the nodes and the client, read by the facade."""

    mode: str  # auto | walk | search
    strategy: str  # how a collection picks its documents
    budget_tokens: int  # of section text tree search reads
    context_window: int  # of the model: decides auto per document
    walk_options: WalkOptions
    notes: list[str] = field(default_factory=list)  # expert notes matching the question
    documents: Sequence[Any] = ()  # a collection's `DocInfo`s (one or none: a single document)
    index_path: str | Any | None = None  # where the collection's semantic index lives (a file, a PostgreSQL store)
    index_name: str = ""
    summarize: Callable[[Node], NodeMeta] | None = None  # lazy summaries: one node's, kept by the facade
    answer: bool = True  # search and retrieve: also make the answer call
    # the tree's index: (text, budget, scope node ids) → evidence under those nodes; None: no index
    retrieve: Callable[[str, int, list[str]], Sequence[Any]] | None = None
    retrieve_budget: int = DEFAULT_BUDGET  # tokens of evidence retrieve reads


def ask_structured(
    nodes: dict[str, Node],
    root_id: str,
    question: str,
    client: Any,
    how: StructuredAsk,
    on_step: EventSink | None = None,
) -> Answer:
    from knowtree.answer.collection import select_documents

    started = time.monotonic()
    trace: list[NavStep] = []
    usage = Usage()

    def step(st: NavStep) -> None:
        trace.append(st)
        if on_step:
            on_step(st)

    infos = list(how.documents)
    scopes: list[list[str]] = [[root_id]]
    if len(infos) > 1:
        sel = select_documents(
            question,
            infos,
            client,
            strategy=how.strategy,
            nodes=nodes,
            index_path=how.index_path,
            index_name=how.index_name,
        )
        sel.step.node_id = root_id
        step(sel.step)
        usage.add(sel.usage)
        chosen = sel.docs or infos
        scopes = [[i.node_id] for i in chosen][:3]
    answer_obj: Answer | None = None
    for scope in scopes:
        # auto decides per document: a collection's outline is never shown whole
        scope_mode = pick_mode(
            how.mode,
            is_structured(nodes, scope[0]),
            outline_tokens(nodes, scope[0]),
            how.context_window,
            navigate=bool(how.notes) or how.retrieve is None,
        )
        if scope_mode == "retrieve":
            got = _retrieve(nodes, question, scope, client, how, step)
        elif scope_mode == "search":
            searcher = TreeSearch(
                nodes,
                client,
                SearchOptions(
                    budget_tokens=how.budget_tokens,
                    outline_tokens=max(800, how.context_window // 2 - 600),
                    expert=how.notes,
                    answer=how.answer,
                ),
                on_step=step,
            )
            got = searcher.ask(question, scope)
            got.trace = trace
            usage.add(searcher.usage)
        else:
            got = _walk(nodes, question, scope[0], client, how, step)
            got.trace = trace
            usage.add(got.usage)
        if answer_obj is None or _rank(got) > _rank(answer_obj):
            answer_obj = got
        if got.status == "complete":
            break
    assert answer_obj is not None
    answer_obj.usage = client.usage.model_copy()  # everything this question cost, lazy summaries too
    answer_obj.usage.seconds = time.monotonic() - started
    answer_obj.trace = trace
    return answer_obj


def _rank(a: Answer) -> int:
    return {"complete": 2, "partial": 1, "none": 0}[a.status]


def index_name(tree: str) -> str:
    """The name of a collection's semantic index for tree `tree` (safe as a table name)."""
    import re

    from knowtree.types import content_hash

    clean = re.sub(r"[^A-Za-z0-9_]", "_", tree)[:40]
    return f"kt_{clean}_{content_hash(tree, length=8)}"


def _retrieve(
    nodes: dict[str, Node],
    question: str,
    scope: list[str],
    client: Any,
    how: StructuredAsk,
    step: Callable[[NavStep], None],
) -> Answer:
    """One document (or the whole tree) read through the index: `answer.indexed.answer_by_parts`
    with retrieval scoped to it; without the answer call (`how.answer` false) the evidence step only."""
    assert how.retrieve is not None
    find = how.retrieve

    def scoped(text: str, tokens: int) -> Sequence[Any]:
        return find(text, tokens, scope)

    if not how.answer:
        step(evidence_step(scope[0], scoped(question, how.retrieve_budget)))
        return Answer(question=question, answer=None, status="none")
    return answer_by_parts(lambda _evidence: nodes, scope[0], question, client, how.retrieve_budget, scoped, step)


def _walk(
    nodes: dict[str, Node],
    question: str,
    top: str,
    client: Any,
    how: StructuredAsk,
    step: Callable[[NavStep], None],
) -> Answer:
    from knowtree.errors import ModelOutputError

    summarize = how.summarize

    def prepare(ids: list[str]) -> None:
        assert summarize is not None
        for nid in ids:
            node = nodes[nid]
            if node.meta.summary:
                continue
            try:
                meta = summarize(node)
            except ModelOutputError as exc:
                step(NavStep(action="choose", node_id=nid, error=f"lazy summary failed: {exc}"))
                continue
            nodes[nid] = node.model_copy(update={"meta": meta})

    walker = StructuredWalker(
        nodes,
        top,
        client,
        how.walk_options,
        on_step=step,
        expert=how.notes,
        prepare=prepare if summarize is not None else None,
    )
    return walker.ask(question)  # its citations name the quote's own lines and page (`search.cite`)
