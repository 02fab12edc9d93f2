"""The LangChain and LlamaIndex retrievers against the real packages (skipped when not installed)."""

from __future__ import annotations

from pathlib import Path

import pytest

import knowtree
from conftest import write_corpus
from knowtree.testing.models import KeywordModel
from server_helpers import CHAT


@pytest.fixture
def kt(tmp_path: Path):
    k = knowtree.open(tmp_path / "kb.db", model=KeywordModel())
    k.build(write_corpus(tmp_path / "docs"), tree="notes")
    k.memory("chat").add(CHAT)
    yield k
    k.close()


def test_langchain_retriever(kt: knowtree.KnowTree) -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.retrievers import BaseRetriever

    from knowtree.adapters.langchain import KnowtreeRetriever

    r = KnowtreeRetriever(kt=kt, tree="notes", budget_tokens=300)
    assert isinstance(r, BaseRetriever)
    docs = r.invoke("Who chose PostgreSQL?")
    assert docs and docs[0].metadata["source"].endswith("database.md") and "Bruno" in docs[0].page_content
    assert docs[0].metadata["score"] > 0 and docs[0].metadata["citation"]["line_start"] >= 1
    assert sum(len(d.page_content) for d in docs) <= 300 * 4
    mem = KnowtreeRetriever(kt=kt, tree="chat").invoke("What is the name of Maria's cat?")
    pixel = [d for d in mem if "Pixel" in d.page_content]
    assert pixel and pixel[0].metadata["citation"]["speaker"] == "Ann"


def test_llamaindex_retriever(kt: knowtree.KnowTree) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.retrievers import BaseRetriever

    from knowtree.adapters.llamaindex import KnowtreeRetriever

    r = KnowtreeRetriever(kt, "notes", budget_tokens=300)
    assert isinstance(r, BaseRetriever)
    nodes = r.retrieve("Who chose PostgreSQL?")
    assert nodes and nodes[0].score and nodes[0].score > 0
    assert nodes[0].node.metadata["source"].endswith("database.md") and "Bruno" in nodes[0].node.get_content()
    assert nodes[0].node.node_id == nodes[0].node.metadata["node_id"]
    mem = KnowtreeRetriever(kt, "chat").retrieve("What is the name of Maria's cat?")
    assert any("Pixel" in n.node.get_content() and n.node.metadata["citation"]["line_start"] == 3 for n in mem)
