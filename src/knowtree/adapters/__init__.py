"""Retriever adapters: knowtree evidence as LangChain documents or LlamaIndex nodes.

`knowtree.adapters.langchain.KnowtreeRetriever` (pip install "knowtree[langchain]") and
`knowtree.adapters.llamaindex.KnowtreeRetriever` (pip install "knowtree[llamaindex]").
May import: the facades and everything below them.
"""
