"""Construction: documents → nodes. Leaf metadata, branch synthesis, grouping, document structure
(outline, TOC, headings), conversation topics, rebalancing, build guards and estimates.

Takes documents, a client and callbacks and returns results; never sees KnowTree or the store.
May import: retrieve, ingest, llm, prompts, config, text, types, errors.
"""

from knowtree.construct.builder import BuildResult, build_tree

__all__ = ["BuildResult", "build_tree"]
