"""The one interface every model adapter implements: `Model.complete(request) -> Completion`.

Adapters only translate a request into their provider's call and the reply back. Caching, the
concurrency limit, retries, validation and the ledger live once, in `knowtree.llm.client`.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Message(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class Request(BaseModel):
    """A provider-neutral chat request. `schema` asks for JSON matching that JSON schema."""

    model_config = ConfigDict(frozen=True)

    messages: list[Message]
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    schema_name: str = "reply"
    max_tokens: int = 512
    temperature: float = 0.0
    #: how many alternatives per reply token to report with their log-probabilities (0: none). A
    #: backend that cannot report them ignores it; the reply's `logprobs` is then None.
    logprobs: int = 0

    def cache_key(self, model_id: str) -> str:
        payload: dict[str, Any] = {
            "model": model_id,
            "messages": [m.model_dump() for m in self.messages],
            "schema": self.schema_,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        if self.logprobs:  # absent otherwise, so the keys of every earlier call stay valid
            payload["logprobs"] = self.logprobs
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class TokenLogprob(BaseModel):
    """One reply token, its log-probability under the model (before any grammar constraint), and
    the most likely alternatives at that position (`top`: (token text, log-probability), best first)."""

    token: str
    logprob: float
    top: list[tuple[str, float]] = Field(default_factory=list)


class Completion(BaseModel):
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str | None = None  # "length" means the reply was truncated
    #: per reply token, when the request asked for `logprobs` and the backend reports them
    logprobs: list[TokenLogprob] | None = None


class Model(ABC):
    """A chat model. Subclasses implement `complete`; everything else has defaults."""

    #: stable identifier, part of every cache key ("local:qwen2.5-coder-1.5b-instruct-q4_k_m", "openai:gpt-4o-mini")
    id: str = "model"
    #: how many calls may run at once against this model (the in-process model runs one at a time)
    max_concurrency: int = 4
    #: the prompt budget the model can take, in tokens
    context_window: int = 8192
    #: USD per million tokens, for the ledger; 0 for local models
    input_cost_per_mtok: float = 0.0
    output_cost_per_mtok: float = 0.0
    #: runs on this machine at no charge: a cost cap (--max-cost) holds without prices
    free: bool = False

    @abstractmethod
    def complete(self, request: Request) -> Completion:
        """Make one call. Raise `TransientModelError` for what is worth retrying."""

    def complete_streaming(self, request: Request, on_text: Callable[[str], None]) -> Completion:
        """Like `complete`, calling `on_text` with each piece of the reply as it is generated.

        Adapters that can stream override this; the default hands over the whole reply at once."""
        completion = self.complete(request)
        on_text(completion.text)
        return completion

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (files, sockets, the in-process model)."""
