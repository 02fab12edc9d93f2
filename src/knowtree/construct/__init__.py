"""Construction: documents → nodes. Leaf metadata, branch synthesis, grouping, document structure
(outline, TOC, headings), conversation topics, rebalancing, build guards and estimates.

Takes documents, a client and callbacks and returns results; never sees KnowTree or the store.
May import: retrieve, ingest, llm, prompts, config, text, types, errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knowtree.construct.builder import BuildResult, build_tree

__all__ = ["BuildResult", "build_tree"]


def __getattr__(name: str) -> Any:
    """`build_tree` and `BuildResult` on first use: importing a submodule (`construct.report` for a
    question's types) does not load the builder (PEP 562)."""
    if name in __all__:
        from knowtree.construct import builder

        return getattr(builder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
