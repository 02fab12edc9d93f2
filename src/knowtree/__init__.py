"""knowtree: navigable long-term memory for LLM applications.

kt = knowtree.open("kb.db")
kt.build(["docs/"], tree="docs")
answer = kt.tree("docs").ask("Who decided to use PostgreSQL, and why?")
print(answer.answer, answer.status, answer.citations)

The public face: `open`, `KnowTree`, `Tree`, `Memory`, the data types and the errors. Importing it
loads no model, no test fake and no evaluation code (tests/test_architecture.py checks that).
"""

import typing as _typing

if _typing.TYPE_CHECKING:
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

#: each public name → the module that defines it, imported on first use (PEP 562). So `import
#: knowtree.cli.app` (the console script) costs no pydantic model: the `knowtree` command sets up
#: its process (`cli.app.main`: the garbage collector's thresholds) before the modules a command
#: needs are imported, and a question on a document tree (a cold `knowtree ask`) never loads the
#: conversation memory's modules (~50 ms).
_LAZY = {
    "Settings": "knowtree.config",
    **dict.fromkeys(("BuildReport", "KnowTree", "open"), "knowtree.core"),
    **dict.fromkeys(
        (
            "BudgetExceededError",
            "ConfigError",
            "InputError",
            "KnowtreeError",
            "ModelCallError",
            "ModelError",
            "ModelOutputError",
            "NotFoundError",
            "StoreError",
            "TransientModelError",
            "UserError",
        ),
        "knowtree.errors",
    ),
    "ChatMessage": "knowtree.ingest.chat",
    "Memory": "knowtree.memory",
    "Tree": "knowtree.tree",
    **dict.fromkeys(
        (
            "Answer",
            "Chunk",
            "Citation",
            "Document",
            "NavStep",
            "Node",
            "NodeKind",
            "NodeMeta",
            "Span",
            "TreeInfo",
            "Usage",
        ),
        "knowtree.types",
    ),
}


def __getattr__(name: str) -> _typing.Any:
    """A public name, its module imported the first time it is asked for (then kept here)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
