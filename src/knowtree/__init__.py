"""knowtree: navigable long-term memory for LLM applications.

kt = knowtree.open("kb.db")
kt.build(["docs/"], tree="docs")
answer = kt.tree("docs").ask("Who decided to use PostgreSQL, and why?")
print(answer.answer, answer.status, answer.citations)

The public face: `open`, `KnowTree`, `Tree`, `Memory`, the data types and the errors. Importing it
loads no model, no test fake and no evaluation code (tests/test_architecture.py checks that).
"""

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
from knowtree.ingest.chat import ChatMessage
from knowtree.memory import Memory
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

__version__ = "0.2.0"

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
