"""A LangChain retriever over a knowtree tree or memory (pip install "knowtree[langchain]").

    from knowtree.adapters.langchain import KnowtreeRetriever
    retriever = KnowtreeRetriever(kt=knowtree.open("kb.db"), tree="docs", budget_tokens=1500)
    docs = retriever.invoke("Who chose PostgreSQL?")   # Documents with score, node id and citation
"""

from __future__ import annotations

from typing import Any

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError('the LangChain retriever needs its extra: pip install "knowtree[langchain]"') from exc

from pydantic import ConfigDict, Field

from knowtree.adapters.evidence import Evidence, retrieve


class KnowtreeRetriever(BaseRetriever):
    """Evidence from a knowtree tree or memory as LangChain `Document`s, best first.

    `metadata` holds `score`, `node_id`, `via` (how it was found), `source` (file or memory),
    `citation` (file, lines/pages or message position, speaker, time) and `tree`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    kt: Any = Field(description="a knowtree.KnowTree (knowtree.open(...))")
    tree: str = Field(description="the tree or memory name")
    budget_tokens: int = Field(1000, ge=50, description="tokens of evidence to return at most")
    use_model: bool = Field(False, description="memories: let the model walk the tree (else hybrid search)")

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        _, evidence = retrieve(self.kt, self.tree, query, self.budget_tokens, use_model=self.use_model)
        return [to_document(e, self.tree) for e in evidence]


def to_document(e: Evidence, tree: str) -> Document:
    citation = e.citation.model_dump(exclude_none=True)
    return Document(
        id=e.node_id or None,
        page_content=e.text,
        metadata={"score": e.score, "node_id": e.node_id, "via": e.via, "source": e.citation.file,
                  "citation": citation, "tree": tree},
    )
