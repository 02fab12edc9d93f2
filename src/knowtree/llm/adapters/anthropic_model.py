"""Claude via the `anthropic` SDK. Structured replies use forced tool use: the tool's input is the JSON.

System messages go to the separate `system=` parameter. The SDK's retries are off (`max_retries=0`):
the shared client retries and records every attempt.
"""

from __future__ import annotations

import json
from typing import Any

from knowtree.errors import ConfigError, ModelCallError, TransientModelError
from knowtree.llm.adapters.openai_compat import error_body, parse_retry_after, tool_name
from knowtree.llm.base import Completion, Model, Request

NEEDS_ANTHROPIC = 'the Anthropic adapter needs the anthropic package: pip install "knowtree[anthropic]"'
AUTH_FAILED = "authentication failed for the Anthropic API: set ANTHROPIC_API_KEY"

_TRANSIENT_STATUS = frozenset({408, 409})  # request timeout, lock conflict (529 "overloaded" is >= 500)
#: Anthropic's stop reasons in the OpenAI vocabulary the rest of knowtree reads ("length" = truncated)
_FINISH = {"max_tokens": "length", "end_turn": "stop", "stop_sequence": "stop", "tool_use": "stop"}


class AnthropicModel(Model):
    """A Claude model through the Messages API."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 120.0,
        max_concurrency: int = 4,
        context_window: int = 200_000,
        input_cost_per_mtok: float = 0.0,
        output_cost_per_mtok: float = 0.0,
        http_client: Any = None,
    ) -> None:
        try:
            import anthropic
        except ImportError as exc:
            raise ConfigError(NEEDS_ANTHROPIC) from exc
        self._anthropic = anthropic
        self.model = model
        self.id = f"anthropic:{model}"
        self.max_concurrency = max_concurrency
        self.context_window = context_window
        self.input_cost_per_mtok = input_cost_per_mtok
        self.output_cost_per_mtok = output_cost_per_mtok
        kwargs: dict[str, Any] = {"timeout": timeout, "max_retries": 0, "http_client": http_client}
        if api_key:
            kwargs["api_key"] = api_key
        if base_url:
            kwargs["base_url"] = base_url
        self._client = anthropic.Anthropic(**kwargs)

    def _kwargs(self, request: Request) -> dict[str, Any]:
        system = "\n\n".join(m.content for m in request.messages if m.role == "system")
        messages: list[dict[str, str]] = []
        for m in request.messages:
            if m.role == "system":
                continue
            if messages and messages[-1]["role"] == m.role:  # the API wants alternating turns
                messages[-1]["content"] += "\n\n" + m.content
            else:
                messages.append({"role": m.role, "content": m.content})
        # The SDK no longer takes `temperature` (recent models fix sampling): it is not sent.
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": request.max_tokens, "messages": messages}
        if system:
            kwargs["system"] = system
        if request.schema_:
            name = tool_name(request.schema_name)
            kwargs["tools"] = [
                {"name": name, "description": "Reply with this structure.", "input_schema": request.schema_}
            ]
            kwargs["tool_choice"] = {"type": "tool", "name": name}
        return kwargs

    def complete(self, request: Request) -> Completion:
        anthropic = self._anthropic
        try:
            response = self._client.messages.create(**self._kwargs(request))
        except anthropic.APIError as exc:
            raise self._classify(exc) from exc
        except TypeError as exc:  # the SDK found no api_key / auth_token / credentials
            if "authentication" in str(exc).lower():
                raise ConfigError(AUTH_FAILED) from exc
            raise
        blocks = list(getattr(response, "content", None) or [])
        tool_inputs = [b.input for b in blocks if getattr(b, "type", None) == "tool_use"]
        if request.schema_ and tool_inputs:
            text = json.dumps(tool_inputs[0], ensure_ascii=False)
        else:
            text = "".join(getattr(b, "text", "") for b in blocks if getattr(b, "type", None) == "text")
        usage = getattr(response, "usage", None)
        stop = getattr(response, "stop_reason", None)
        return Completion(
            text=text,
            input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
            finish_reason=_FINISH.get(stop, stop) if stop else None,
        )

    def _classify(self, exc: Exception) -> Exception:
        anthropic = self._anthropic
        if isinstance(exc, anthropic.AuthenticationError):
            return ConfigError(AUTH_FAILED)
        if isinstance(exc, anthropic.APIConnectionError):  # includes APITimeoutError
            return TransientModelError(f"{self.id}: {getattr(exc, 'message', '') or type(exc).__name__}")
        if isinstance(exc, anthropic.APIStatusError):
            status = exc.status_code
            message = f"{self.id}: HTTP {status}: {error_body(exc)}"
            if isinstance(exc, anthropic.RateLimitError) or status >= 500 or status in _TRANSIENT_STATUS:
                return TransientModelError(message, retry_after=parse_retry_after(exc.response.headers))
            if status == 404:
                return ConfigError(f"{message} (check the model name)")
            return ModelCallError(message)
        return ModelCallError(f"{self.id}: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        self._client.close()
