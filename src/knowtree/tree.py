"""`Tree`: one named tree in a database, the facade questions go through.

`Tree.ask` asks `knowtree.answer.router` for a plan and executes it (`run_plan`) as one recorded run:
it reads what the plan needs from the store (nodes, the index, expert notes, a collection's
documents) and hands nodes, a client, callbacks and retrieval results to `knowtree.answer`.
`Tree.enrich` adds the model-written metadata to a tree built without it (`construct.enrich`), as
one recorded run too, storing each node's as it is made.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from knowtree.answer.modes import is_structured
from knowtree.answer.router import Plan, route
from knowtree.answer.walk import EventSink, Walker, WalkOptions
from knowtree.errors import NotFoundError
from knowtree.store.dialect import is_url
from knowtree.types import Answer, Node, NodeMeta, TreeInfo

if TYPE_CHECKING:
    from knowtree.construct.builder import Progress
    from knowtree.construct.estimate import Confirm
    from knowtree.construct.report import EnrichReport
    from knowtree.host import Host
    from knowtree.llm.client import LLMClient
    from knowtree.retrieve.treesearch import Evidence


class Tree:
    """One named tree in a database."""

    def __init__(self, kt: Host, name: str) -> None:
        self.kt = kt
        self.name = name
        # one row read (NotFoundError for a missing tree); `info`, which counts the nodes, when asked
        self.root_id, self.kind = kt.store.tree_root_kind(name)
        self._info: TreeInfo | None = None
        self._nodes: dict[str, Node] | None = None

    @property
    def info(self) -> TreeInfo:
        """The tree's summary (its node, leaf and document counts: read on first use)."""
        if self._info is None:
            self._info = self.kt.store.tree_info(self.name)
        return self._info

    @property
    def nodes(self) -> dict[str, Node]:
        if self._nodes is None:
            self._nodes = self.kt.store.load_nodes(self.name)
        return self._nodes

    @property
    def root(self) -> Node:
        assert self.root_id is not None
        return self.nodes[self.root_id]

    def _read_nodes(self, ids: Sequence[str]) -> dict[str, Node]:
        """The nodes `ids` names (those the tree has): from the loaded tree when it is loaded, else only
        those from the store, so that answering from the index does not load a large tree whole."""
        if self._nodes is not None:
            return {i: self._nodes[i] for i in dict.fromkeys(ids) if i in self._nodes}
        return self.kt.store.load_nodes(self.name, ids)

    def _evidence_nodes(self, evidence: Sequence[Evidence]) -> dict[str, Node]:
        """What the answer step reads for `evidence`: its items' leaves and the root."""
        from knowtree.answer.indexed import evidence_node_ids

        return self._read_nodes([*([self.root_id] if self.root_id else []), *evidence_node_ids(evidence)])

    def _is_structured(self) -> bool:
        """Whether the tree was built from its documents' structure: its root has a title (one node read)."""
        root = self.root_id
        return root is not None and is_structured(self._read_nodes([root]), root)

    def node(self, node_id: str) -> Node:
        matches = [n for i, n in self.nodes.items() if i.startswith(node_id)]
        if len(matches) != 1:
            why = "no node" if not matches else f"{len(matches)} nodes"
            raise NotFoundError(f"{why} with id {node_id!r} in tree {self.name!r}")
        return matches[0]

    def ask(
        self,
        question: str,
        *,
        on_step: EventSink | None = None,
        on_token: Callable[[str], None] | None = None,
        max_branch_attempts: int | None = None,
        leaves_per_branch: int | None = None,
        mode: str | None = None,
        strategy: str | None = None,
        navigator: str | None = None,
        budget_tokens: int | None = None,
    ) -> Answer:
        """Answer `question` the way `knowtree.answer.router` decides for this tree's kind.

        `mode`: auto | walk | search | retrieve | nav (default: the `ask_mode` setting); `strategy`:
        how a collection picks documents (auto | describe | metadata | semantic); `navigator`: how a
        conversation memory is walked (tree | agent); `budget_tokens`: text read (tree search,
        retrieve and nav; a memory's reading budget). `mode="retrieve"`: the tree as an index finds
        the evidence without a model, one call answers. `on_token`: a memory's answer text as the
        model writes it."""
        plan = route(
            self.kind,
            mode,
            default_mode=self.kt.settings.ask_mode,
            strategy=strategy,
            navigator=navigator,
            structured=self._is_structured,
        )
        if plan.route == "memory":  # a memory: answered by its own navigator, with the budget given
            return self.kt.memory(self.name).ask(
                question,
                mode=mode,
                navigator=navigator,
                budget_tokens=budget_tokens,
                on_step=on_step,
                on_token=on_token,
            )
        return self.run_plan(
            plan,
            question,
            budget_tokens=budget_tokens,
            on_step=on_step,
            # the walk's options read every leaf's length: only for the plans that walk
            walk_options=(
                self.walk_options(max_branch_attempts, leaves_per_branch)
                if plan.route in ("walk", "structured")
                else None
            ),
        )

    def walk_options(
        self, max_branch_attempts: int | None = None, leaves_per_branch: int | None = None
    ) -> WalkOptions:
        s = self.kt.settings
        return WalkOptions(
            max_branch_attempts=max_branch_attempts or s.max_branch_attempts,
            leaves_per_branch=leaves_per_branch or s.leaves_per_branch,
            # show whole leaves: as long as the longest one in this tree (chunk size + overlap)
            leaf_chars=max(6000, max((len(n.text) for n in self.nodes.values() if n.is_leaf), default=0)),
        )

    def run_plan(
        self,
        plan: Plan,
        question: str,
        *,
        budget_tokens: int | None = None,
        on_step: EventSink | None = None,
        walk_options: WalkOptions | None = None,
        answer: bool = True,
    ) -> Answer:
        """Execute a plan of `knowtree.answer.router.route` over this tree, as one recorded run
        (`answer=False`: tree search selects without the answer call, for benchmarks)."""
        if plan.route == "memory":
            return self.kt.memory(self.name).ask(
                question,
                mode=plan.mode,
                navigator=None if plan.navigator == "index" else plan.navigator,  # "index" is routed by the mode, not named
                budget_tokens=budget_tokens,
                on_step=on_step,
            )
        with self.kt.run("ask", self.name, question) as run:
            assert run.client is not None
            started = time.monotonic()
            if plan.route == "retrieve":
                got = self._retrieve_answer(question, run.client, budget_tokens, on_step)
                got.usage.seconds = time.monotonic() - started
            elif plan.route == "nav":
                got = self._nav_answer(question, run.client, budget_tokens, on_step)
                got.usage.seconds = time.monotonic() - started
            elif plan.route == "structured":
                got = self._structured_answer(
                    plan, question, run.client, budget_tokens, walk_options, on_step, answer
                )
            else:
                options = walk_options or self.walk_options()
                got = Walker(self.nodes, self.root.id, run.client, options, on_step=on_step).ask(question)
            run.status = got.status
        return got

    def _retrieve_answer(
        self, question: str, client: LLMClient, budget_tokens: int | None, on_step: EventSink | None
    ) -> Answer:
        from knowtree.answer.indexed import DEFAULT_BUDGET, answer_by_parts

        budget = budget_tokens or DEFAULT_BUDGET
        return answer_by_parts(
            self._evidence_nodes,
            self.root_id,
            question,
            client,
            budget,
            lambda text, tokens: self.retrieve(text, budget_tokens=tokens),
            on_step,
        )

    def _nav_answer(
        self, question: str, client: LLMClient, budget_tokens: int | None, on_step: EventSink | None
    ) -> Answer:
        """Score-guided navigation: the tree's scores (no model), a judged beam, one answer call; a
        question asking for several facts: per part, as `--mode retrieve` does."""
        from knowtree.answer.indexed import DEFAULT_BUDGET, by_parts
        from knowtree.answer.nav import ask_nav, judged_beam
        from knowtree.retrieve.treesearch import search_index, shape_of

        index = self.kt.tree_index(self.name)
        shape = shape_of(index)  # once for every part
        budget = budget_tokens or DEFAULT_BUDGET

        def answer_part(part: str, share: int) -> Answer:
            beam = judged_beam(client, part, on_step=on_step, budget_tokens=share)
            found = search_index(index, part, share, kind=self.kind, rerank=beam, shape=shape)
            nodes = self._evidence_nodes(found.evidence)
            return ask_nav(found, nodes, self.root_id, part, client, budget=share, on_step=on_step)

        got = by_parts(question, client, budget, answer_part, on_step)
        got.usage = client.usage.model_copy()  # each part's answer carried the client's running total
        return got

    def _structured_answer(
        self,
        plan: Plan,
        question: str,
        client: LLMClient,
        budget_tokens: int | None,
        walk_options: WalkOptions | None,
        on_step: EventSink | None,
        answer: bool,
    ) -> Answer:
        """Structured trees and collections: what the question needs from the store (expert notes,
        the collection's documents, lazy summaries kept), then `answer.modes.ask_structured`."""
        from knowtree.answer.indexed import DEFAULT_BUDGET
        from knowtree.answer.modes import StructuredAsk, ask_structured, expert_notes, index_name
        from knowtree.store.docinfo import doc_infos, list_experts

        store, s = self.kt.store, self.kt.settings
        lazy = store.tree_settings(self.name).get("summaries") == "lazy"
        how = StructuredAsk(
            mode=plan.mode,
            strategy=plan.strategy or s.collection_strategy,
            budget_tokens=budget_tokens or s.search_budget_tokens,
            context_window=self.kt.model.context_window,
            walk_options=walk_options or self.walk_options(),
            notes=expert_notes([n.text for n in list_experts(store, self.name)], question),
            documents=doc_infos(store, self.name),
            # the collection's flat index: in the SQLite file or the PostgreSQL database; in memory for ":memory:"
            index_path=store if is_url(store.path) else store.path if store.path != ":memory:" else None,
            index_name=index_name(self.name),
            summarize=self._summarizer(client) if lazy else None,
            answer=answer,
            retrieve=lambda text, tokens, scope: self.retrieve(text, budget_tokens=tokens, scope=scope),
            retrieve_budget=budget_tokens or DEFAULT_BUDGET,
        )
        return ask_structured(self.nodes, self.root.id, question, client, how, on_step)

    def _summarizer(self, client: LLMClient) -> Callable[[Node], NodeMeta]:
        """Lazy summaries (`summaries="lazy"`): a node's metadata made when a navigator first shows
        it, and kept in the store so it is paid once."""
        from knowtree.construct.structure import summarize_node
        from knowtree.construct.taxonomy import DEFAULT_TAXONOMY
        from knowtree.store.docinfo import update_node_meta

        taxonomy = self.kt.settings.taxonomy or DEFAULT_TAXONOMY

        def summarize(node: Node) -> NodeMeta:
            meta, _used = summarize_node(client, node, self.nodes, taxonomy)
            update_node_meta(self.kt.store, self.name, node, meta)
            return meta

        return summarize

    def enrich(
        self,
        *,
        leaves: bool | None = None,
        root: bool = True,
        force: bool = False,
        progress: Progress | None = None,
        on_client: Callable[[LLMClient], None] | None = None,
        confirm: Confirm | None = None,
    ) -> EnrichReport:
        """Add the model-written metadata to a tree built without it (`summaries="none"`, or only in
        part by `"lazy"`): bottom-up, with the build's prompts (`construct.enrich`), every call through
        the client a build uses (cache, budget caps, the ledger: one "enrich" run).

        Only metadata changes: text, spans, titles and time ranges stay. Each node's metadata is
        stored as soon as it is made, and nodes already summarized are kept (their metadata feeds
        their parents) unless `force`, so an interrupted enrich resumes where it stopped, its finished
        calls answered by the cache. A malformed reply leaves its node as it was (`fallbacks`).
        `leaves`: summarize every leaf too [default: yes, except in a conversation memory, whose
        leaves are single messages: one summary per run of them]; `root`: the root too. The tree's
        index is brought up to date at the end, re-deriving only the entries the new metadata changed.
        `confirm` is asked, as a build's is, when the estimated calls pass `confirm_calls` (and no
        `max_calls` caps the run); a refusal raises `UserError` before any call."""
        from knowtree.construct.enrich import Enriched, enrich_tree, estimate_enrich, is_summarized, plan
        from knowtree.construct.estimate import confirm_estimate
        from knowtree.construct.report import EnrichReport
        from knowtree.construct.taxonomy import DEFAULT_TAXONOMY
        from knowtree.retrieve.treeindex import TreeIndex

        started = time.monotonic()
        store, name = self.kt.store, self.name
        nodes = self.nodes
        root_id = self.root_id
        if leaves is None:
            leaves = self.kind != "conversation"
        keep = frozenset() if force else frozenset(i for i, n in nodes.items() if is_summarized(n))
        stored = store.tree_settings(name).get("taxonomy")
        taxonomy = list(stored) if isinstance(stored, list) and stored else None
        flags = [f for f, on in (("leaves", leaves), ("root", root), ("force", force)) if on]
        if confirm is not None and root_id is not None and root_id in nodes:
            s = self.kt.settings
            levels = plan(nodes, root_id, leaves=leaves, root=root, keep=keep)
            estimate = estimate_enrich(
                nodes,
                levels,
                leaves=leaves,
                kept=len(keep),
                tree=name,
                input_cost_per_mtok=s.input_cost_per_mtok,
                output_cost_per_mtok=s.output_cost_per_mtok,
            )
            confirm_estimate(estimate, s, confirm)
        with self.kt.run("enrich", name, detail=", ".join(flags)) as run:
            assert run.client is not None
            if on_client is not None:
                on_client(run.client)

            def write(node_id: str, meta: NodeMeta) -> None:
                store.update_node_meta(name, nodes[node_id], meta)
                nodes[node_id] = nodes[node_id].model_copy(update={"meta": meta})

            done = Enriched()
            if root_id is not None and root_id in nodes:  # else an empty memory: nothing to enrich
                from knowtree.distributed import fanout_for

                s = self.kt.settings
                # with executor ray: each level's calls as Ray tasks; the metadata stored here
                with fanout_for(run.client, s) as fanout:
                    done = enrich_tree(
                        list(nodes.values()),
                        root_id,
                        run.client,
                        taxonomy or s.taxonomy or DEFAULT_TAXONOMY,
                        leaves=leaves,
                        root=root,
                        keep=keep,
                        on_meta=write,
                        progress=progress,
                        fanout=fanout,
                    )
            usage = run.client.usage.model_copy()
        sync = TreeIndex(store, name).last_sync if done.metas else None  # only what changed
        self._info = None  # counted again when asked
        self.root_id, self.kind = store.tree_root_kind(name)
        model = self.kt.model
        return EnrichReport(
            tree=name,
            enriched=len(done.metas),
            kept=len(keep),
            fallbacks=done.fallbacks,
            reindexed=sync.written + sync.moved if sync else 0,
            usage=usage,
            seconds=time.monotonic() - started,
            run_id=run.id,
            priced=bool(model.input_cost_per_mtok or model.output_cost_per_mtok),
        )

    def retrieve(
        self,
        question: str,
        *,
        budget_tokens: int = 1024,
        embedder: Any = "default",
        scope: Sequence[str] | None = None,
    ) -> list[Evidence]:
        """The best evidence for `question` within `budget_tokens`, with no model call: the tree as an
        index (contextual BM25 + dense scores rolled up the tree), in document order, with scores and
        citations. `embedder`: "default", a name ("hash"), an `Embedder`, or None for BM25 only;
        `scope`: node ids (a collection's documents) the evidence must come from (default: the tree)."""
        from knowtree.retrieve.treesearch import search_index

        return search_index(
            self.kt.tree_index(self.name),  # synced first if the tree changed since it was read
            question,
            budget_tokens,
            kind=self.kind,
            embedder=embedder,
            scope=None if scope is None or self.root_id in scope else scope,
        ).evidence
