"""knowtree: navigable long-term memory for LLM applications.

kt = knowtree.open("kb.db")
kt.build(["docs/"], tree="docs")
answer = kt.tree("docs").ask("Who decided to use PostgreSQL, and why?")
print(answer.answer, answer.status, answer.citations)

The public face: `open`, `KnowTree`, `Tree`, `Memory`, the data types and the errors. Importing it
loads no model, no test fake and no evaluation code (tests/test_architecture.py checks that).
"""

import typing as _typing

from knowtree.config import Settings
from knowtree.core import BuildReport, KnowTree, open
from knowtree.errors import (
    BudgetExceededError,
    ConfigError,
    InputError,
    KnowtreeError,
    ModelCallError,
    ModelError,
    ModelOutputError,
    NotFoundError,
    StoreError,
    TransientModelError,
    UserError,
)
from knowtree.tree import Tree
from knowtree.types import (
    Answer,
    Chunk,
    Citation,
    Document,
    NavStep,
    Node,
    NodeKind,
    NodeMeta,
    Span,
    TreeInfo,
    Usage,
)

if _typing.TYPE_CHECKING:
    from knowtree.ingest.chat import ChatMessage
    from knowtree.memory import Memory

__version__ = "0.2.0"


_LAZY = {"ChatMessage": "knowtree.ingest.chat", "Memory": "knowtree.memory"}


def __getattr__(name: str) -> _typing.Any:
    """`Memory` and `ChatMessage`, imported on first use: a question on a document tree (a cold
    `knowtree ask`) does not load the conversation memory's modules (~50 ms)."""
    if name == "Memory":
        from knowtree.memory import Memory

        return Memory
    if name == "ChatMessage":
        from knowtree.ingest.chat import ChatMessage

        return ChatMessage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "Answer",
    "BudgetExceededError",
    "BuildReport",
    "ChatMessage",
    "Chunk",
    "Citation",
    "ConfigError",
    "Document",
    "InputError",
    "KnowTree",
    "KnowtreeError",
    "Memory",
    "ModelCallError",
    "ModelError",
    "ModelOutputError",
    "NavStep",
    "Node",
    "NodeKind",
    "NodeMeta",
    "NotFoundError",
    "Settings",
    "Span",
    "StoreError",
    "TransientModelError",
    "Tree",
    "TreeInfo",
    "Usage",
    "UserError",
    "open",
]
