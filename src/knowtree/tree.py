"""`Tree`: one named tree in a database, the facade questions go through."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from knowtree.answer.walk import EventSink, Walker, WalkOptions
from knowtree.errors import NotFoundError
from knowtree.types import Answer, Node, TreeInfo

if TYPE_CHECKING:
    from knowtree.core import KnowTree
    from knowtree.retrieve.treesearch import Evidence


class Tree:
    """One named tree in a database."""

    def __init__(self, kt: KnowTree, name: str) -> None:
        self.kt = kt
        self.name = name
        self.info: TreeInfo = kt.store.tree_info(name)
        self._nodes: dict[str, Node] | None = None

    @property
    def nodes(self) -> dict[str, Node]:
        if self._nodes is None:
            self._nodes = self.kt.store.load_nodes(self.name)
        return self._nodes

    @property
    def root(self) -> Node:
        assert self.info.root_id is not None
        return self.nodes[self.info.root_id]

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
        max_branch_attempts: int | None = None,
        leaves_per_branch: int | None = None,
        mode: str | None = None,
        strategy: str | None = None,
        budget_tokens: int | None = None,
    ) -> Answer:
        """`mode`: walk | search | auto (default: the `ask_mode` setting); `strategy`: how a collection
        picks documents (auto | describe | metadata | semantic); `budget_tokens`: text tree search reads.
        `mode="retrieve"`: the tree as an index finds the evidence without a model, one call answers."""
        if mode == "nav":  # score-guided navigation: the tree's scores, a judged beam, one answer call
            from knowtree.answer.nav import ask_nav

            return ask_nav(self, question, budget_tokens=budget_tokens, on_step=on_step)
        if mode == "retrieve":  # every tree kind, memories included
            from knowtree.answer.indexed import answer_from_index

            return answer_from_index(self, question, budget_tokens=budget_tokens, on_step=on_step)
        if self.info.kind == "conversation":  # a memory: answered by its own navigator
            return self.kt.memory(self.name).ask(question, on_step=on_step)
        from knowtree.answer.modes import ask_structured, check_choice, is_structured

        check_choice(mode, strategy)
        if is_structured(self.nodes, self.root.id) or (mode or self.kt.settings.ask_mode) == "search":
            return ask_structured(
                self,
                question,
                mode=mode or self.kt.settings.ask_mode,
                strategy=strategy,
                budget_tokens=budget_tokens,
                on_step=on_step,
                walk_options=(
                    WalkOptions(
                        max_branch_attempts=max_branch_attempts or self.kt.settings.max_branch_attempts,
                        leaves_per_branch=leaves_per_branch or self.kt.settings.leaves_per_branch,
                        leaf_chars=max(6000, max((len(n.text) for n in self.nodes.values() if n.is_leaf), default=0)),
                    )
                    if max_branch_attempts or leaves_per_branch
                    else None
                ),
            )
        s = self.kt.settings
        options = WalkOptions(
            max_branch_attempts=max_branch_attempts or s.max_branch_attempts,
            leaves_per_branch=leaves_per_branch or s.leaves_per_branch,
            # show whole leaves: as long as the longest one in this tree (chunk size + overlap)
            leaf_chars=max(6000, max((len(n.text) for n in self.nodes.values() if n.is_leaf), default=0)),
        )
        with self.kt.run("ask", self.name, question) as run:
            assert run.client is not None
            answer = Walker(self.nodes, self.root.id, run.client, options, on_step=on_step).ask(question)
            run.status = answer.status
        return answer

    def retrieve(self, question: str, *, budget_tokens: int = 1024, embedder: Any = "default") -> list[Evidence]:
        """The best evidence for `question` within `budget_tokens`, with no model call: the tree as an
        index (contextual BM25 + dense scores rolled up the tree), in document order, with scores and
        citations. `embedder`: "default", a name ("hash"), an `Embedder`, or None for BM25 only."""
        from knowtree.retrieve.treesearch import retrieve_evidence

        return retrieve_evidence(
            self.kt.store, self.name, question, budget_tokens, kind=self.info.kind, embedder=embedder
        )
