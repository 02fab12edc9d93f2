"""A LlamaIndex retriever over a knowtree tree or memory (pip install "knowtree[llamaindex]").

    from knowtree.adapters.llamaindex import KnowtreeRetriever
    retriever = KnowtreeRetriever(knowtree.open("kb.db"), "docs", budget_tokens=1500)
    nodes = retriever.retrieve("Who chose PostgreSQL?")   # NodeWithScore, citation in node.metadata
"""

from __future__ import annotations

from typing import Any

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError('the LlamaIndex retriever needs its extra: pip install "knowtree[llamaindex]"') from exc

from knowtree.adapters.evidence import Evidence, retrieve


class KnowtreeRetriever(BaseRetriever):
    """Evidence from a knowtree tree or memory as LlamaIndex `NodeWithScore`s, best first.

    Each `TextNode` has the knowtree node id as its id and `metadata` with `node_id`, `via`, `source`,
    `citation` and `tree` (kept out of the embedding/LLM metadata text except `source`)."""

    def __init__(
        self,
        kt: Any,
        tree: str,
        *,
        budget_tokens: int = 1000,
        use_model: bool = False,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        self.kt = kt
        self.tree = tree
        self.budget_tokens = budget_tokens
        self.use_model = use_model
        super().__init__(callback_manager=callback_manager)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        _, evidence = retrieve(self.kt, self.tree, query_bundle.query_str, self.budget_tokens, use_model=self.use_model)
        return [to_node(e, self.tree) for e in evidence]


def to_node(e: Evidence, tree: str) -> NodeWithScore:
    hidden = ["node_id", "via", "citation", "tree"]
    node = TextNode(
        id_=e.node_id or None,
        text=e.text,
        metadata={"node_id": e.node_id, "via": e.via, "source": e.citation.file,
                  "citation": e.citation.model_dump(exclude_none=True), "tree": tree},
        excluded_embed_metadata_keys=hidden,
        excluded_llm_metadata_keys=hidden,
    )
    return NodeWithScore(node=node, score=e.score)
