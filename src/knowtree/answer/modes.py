"""Answering on structured trees and collections: pick the mode, the documents, the expert notes.

* `walk`: the walker (choose, read, verify, backtrack) over section titles and whatever metadata
  the nodes have; nodes without a summary get one the first time they are shown when the tree was
  built with `summaries="lazy"` (kept in the store, so it is paid once).
* `search`: `navigate.search.TreeSearch`, one call over the outline.
* `auto`: search for trees built from a document's structure whose outline fits in half the model's
  context window (level-by-level search otherwise costs a few calls, still fewer than a walk);
  walk for chunk-based trees, which have no titles to search.

In a collection (several documents), the documents are chosen first (`navigate.collection`), then
searched or walked one by one until one answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from knowtree.answer.search import Openings, SearchOptions, TreeSearch, cite
from knowtree.answer.walk import EventSink, Walker, WalkOptions
from knowtree.answer.walk import WalkState as _State
from knowtree.types import Answer, NavStep, Node, Usage

if TYPE_CHECKING:
    from knowtree.tree import Tree


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


MODES = ("auto", "walk", "search", "retrieve")
STRATEGIES = ("auto", "describe", "metadata", "semantic")


def check_choice(mode: str | None, strategy: str | None = None) -> None:
    from knowtree.errors import ConfigError

    if mode is not None and mode not in MODES:
        raise ConfigError(f"unknown ask mode {mode!r} (known: {', '.join(MODES)})")
    if strategy is not None and strategy not in STRATEGIES:
        raise ConfigError(f"unknown collection strategy {strategy!r} (known: {', '.join(STRATEGIES)})")


def pick_mode(mode: str, nodes: dict[str, Node], root_id: str, context_window: int) -> str:
    check_choice(mode)
    if mode in ("walk", "search"):
        return mode
    if not is_structured(nodes, root_id):
        return "walk"
    return "search" if outline_tokens(nodes, root_id) <= context_window // 2 else "walk"


def expert_notes(tree: Tree, question: str, limit: int = 3) -> list[str]:
    """The expert notes of this tree (and '*' notes) that match the question: by shared words, else
    by embedding similarity when the embedding extra is installed."""
    from knowtree.answer.evidence import content_words
    from knowtree.store.docinfo import list_experts
    from knowtree.text import stem

    notes = list_experts(tree.kt.store, tree.name)
    if not notes:
        return []
    asked = {stem(w) for w in content_words(question)}
    scored = []
    for n in notes:
        shared = len(asked & {stem(w) for w in content_words(n.text)})
        scored.append((shared, n.text))
    picked = [t for s, t in sorted(scored, key=lambda x: -x[0]) if s > 0][:limit]
    if picked:
        return picked
    try:
        from knowtree.retrieve.embed import get_embedder

        emb = get_embedder()
        vecs = emb.embed([question, *(n.text for n in notes)])
    except Exception:  # no embedding extra: keyword matching only
        return []
    sims = vecs[1:] @ vecs[0]
    ranked = sorted(range(len(notes)), key=lambda i: -float(sims[i]))
    return [notes[i].text for i in ranked if float(sims[i]) >= 0.45][:limit]


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

    def _memory(self, state: _State) -> str:
        base = super()._memory(state)
        if not self.expert:
            return base
        return "\nExpert advice: " + " ".join(self.expert) + "\n" + base

    def _choose(self, node: Node, options: list[str], question: str, state: _State) -> str:
        if self.prepare is not None and len(options) > 1:
            self.prepare(options)
        return super()._choose(node, options, question, state)

    @staticmethod
    def _option_text(node: Node) -> str:
        return node.meta.title + " " + Walker._option_text(node)

    def _descend(self, node: Node, question: str, state: _State) -> Node | None:
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


def ask_structured(
    tree: Tree,
    question: str,
    *,
    mode: str,
    strategy: str | None = None,
    budget_tokens: int | None = None,
    on_step: EventSink | None = None,
    walk_options: WalkOptions | None = None,
    answer: bool = True,
) -> Answer:
    from knowtree.answer.collection import select_documents
    from knowtree.store.docinfo import doc_infos

    kt = tree.kt
    s = kt.settings
    nodes = tree.nodes
    root_id = tree.root.id
    model = kt.model
    check_choice(mode, strategy)
    run_id = kt.store.start_run("ask", tree.name, detail=question[:500])
    client = kt.client(run_id)
    started = time.monotonic()
    trace: list[NavStep] = []
    usage = Usage()

    def step(st: NavStep) -> None:
        trace.append(st)
        if on_step:
            on_step(st)

    try:
        notes = expert_notes(tree, question)
        infos = doc_infos(kt.store, tree.name)
        scopes: list[list[str]] = [[root_id]]
        if len(infos) > 1:
            sel = select_documents(
                question,
                infos,
                client,
                strategy=strategy or s.collection_strategy,
                nodes=nodes,
                index_path=kt.store.path if kt.store.path != ":memory:" else None,
                index_name=f"kt_{_safe(tree.name)}",
            )
            sel.step.node_id = root_id
            step(sel.step)
            usage.add(sel.usage)
            chosen = sel.docs or infos
            scopes = [[i.node_id] for i in chosen][:3]
        answer_obj: Answer | None = None
        for scope in scopes:
            # auto decides per document: a collection's outline is never shown whole
            scope_mode = pick_mode(mode, nodes, scope[0], model.context_window)
            if scope_mode == "search":
                searcher = TreeSearch(
                    nodes,
                    client,
                    SearchOptions(
                        budget_tokens=budget_tokens or s.search_budget_tokens,
                        outline_tokens=max(800, model.context_window // 2 - 600),
                        expert=notes,
                        answer=answer,
                    ),
                    on_step=step,
                )
                got = searcher.ask(question, scope)
                got.trace = trace
                usage.add(searcher.usage)
            else:
                got = _walk(tree, question, scope[0], client, notes, walk_options, step)
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
    except BaseException:
        kt.store.finish_run(run_id, "failed")
        raise
    kt.store.finish_run(run_id, answer_obj.status)
    return answer_obj


def _rank(a: Answer) -> int:
    return {"complete": 2, "partial": 1, "none": 0}[a.status]


def _safe(name: str) -> str:
    import re

    from knowtree.types import content_hash

    clean = re.sub(r"[^A-Za-z0-9_]", "_", name)[:40]
    return f"{clean}_{content_hash(name, length=8)}"


def _walk(
    tree: Tree,
    question: str,
    top: str,
    client: Any,
    notes: list[str],
    options: WalkOptions | None,
    step: Callable[[NavStep], None],
) -> Answer:
    from knowtree.construct.structure import summarize_node
    from knowtree.construct.taxonomy import DEFAULT_TAXONOMY
    from knowtree.errors import ModelOutputError
    from knowtree.store.docinfo import update_node_meta

    kt = tree.kt
    nodes = tree.nodes
    settings = kt.store.tree_settings(tree.name)
    lazy = settings.get("summaries") == "lazy"
    taxonomy = kt.settings.taxonomy or DEFAULT_TAXONOMY

    def prepare(ids: list[str]) -> None:
        for nid in ids:
            node = nodes[nid]
            if node.meta.summary:
                continue
            try:
                meta, _used = summarize_node(client, node, nodes, taxonomy)
            except ModelOutputError as exc:
                step(NavStep(action="choose", node_id=nid, error=f"lazy summary failed: {exc}"))
                continue
            nodes[nid] = node.model_copy(update={"meta": meta})
            update_node_meta(kt.store, tree.name, node, meta)

    s = kt.settings
    opts = options or WalkOptions(
        max_branch_attempts=s.max_branch_attempts,
        leaves_per_branch=s.leaves_per_branch,
        leaf_chars=max(6000, max((len(n.text) for n in nodes.values() if n.is_leaf), default=0)),
    )
    walker = StructuredWalker(
        nodes, top, client, opts, on_step=step, expert=notes, prepare=prepare if lazy else None
    )
    got = walker.ask(question)
    # page-level citations: the page the quote is on
    got.citations = [cite(nodes[c.node_id], c.quote) if c.node_id in nodes else c for c in got.citations]
    return got
