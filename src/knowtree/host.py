"""What the facades `Tree`, `Memory` and `KB` need of their database: `Host`, a Protocol that
`knowtree.core.KnowTree` satisfies, and `Run`, the handle `KnowTree.run()` yields.

It lives apart so that `tree.py`, `memory.py` and `kb.py` never import `core.py` (which creates
them): the facades import this module, `core.py` imports them, and no import goes back.
May import: config, llm, store (types only), errors, types.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from knowtree.config import Settings
    from knowtree.llm.base import Model
    from knowtree.llm.client import LLMClient
    from knowtree.store.protocol import SQLStore


@dataclass
class Run:
    """One recorded job (`KnowTree.run`): its id, the client charging calls to it, its final status."""

    id: str
    client: LLMClient | None
    status: str = "ok"


class Host(Protocol):
    """A knowtree database as the facades see it (`KnowTree` is one)."""

    settings: Settings
    store: SQLStore

    @property
    def model(self) -> Model: ...

    def client(self, run_id: str | None = None) -> LLMClient: ...

    def run(
        self, kind: str, label: str | None, detail: str = "", *, model: bool = True, space: str = "tree"
    ) -> AbstractContextManager[Run]: ...

    def tree(self, name: str) -> Any: ...  # a `knowtree.tree.Tree`

    def memory(self, name: str) -> Any: ...  # a `knowtree.memory.Memory`

    def tree_index(self, name: str) -> Any: ...  # a `knowtree.retrieve.treeindex.TreeIndex`, kept between questions
