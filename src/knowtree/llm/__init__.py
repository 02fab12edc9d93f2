"""LLM access: one small interface (`Model.complete`), adapters per provider, one client for the rest
(cache, concurrency limit, retries honouring Retry-After, budgets, the token/cost ledger).

Adapters import their SDKs lazily: `import knowtree.llm` loads no provider library.
May import: config, text, types, errors — nothing above (the client is handed its store).
"""

from knowtree.llm.base import Completion, Message, Model, Request
from knowtree.llm.client import CallResult, ClientOptions, LLMClient, MemoryCallStore
from knowtree.llm.registry import ModelSpec, register_model

__all__ = [
    "CallResult",
    "ClientOptions",
    "Completion",
    "LLMClient",
    "MemoryCallStore",
    "Message",
    "Model",
    "ModelSpec",
    "Request",
    "register_model",
]
