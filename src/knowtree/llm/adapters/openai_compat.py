"""Any OpenAI-compatible chat server (OpenAI, vLLM, Ollama, llama.cpp server, LM Studio) via the `openai` SDK.

Servers disagree on how to ask for JSON, so with `structured="auto"` the adapter tries the forms in order
(`json_schema` → llama.cpp's `json_object`+`schema` → plain `json_object` → schema in the prompt),
downgrades when a server rejects one, and remembers what worked. The SDK's own retries are off
(`max_retries=0`): the shared client retries, and counts every attempt in the ledger.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Mapping
from typing import Any

from knowtree.errors import ConfigError, ModelCallError, TransientModelError
from knowtree.llm.base import Completion, Model, Request, TokenLogprob

NEEDS_OPENAI = 'the OpenAI-compatible adapter needs the openai package: pip install "knowtree[openai]"'

#: structured-output forms, most to least reliable
MODES: tuple[str, ...] = ("json_schema", "llama", "json_object", "prompt")

_SCHEMA_REJECTION = ("response_format", "json_schema", "schema", "not supported")
_TRANSIENT_STATUS = frozenset({408, 409})  # request timeout, lock conflict: the SDK retries these too
_MAX_BODY = 300


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `retry-after` given as seconds or an HTTP date."""
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_body(exc: Exception, limit: int = _MAX_BODY) -> str:
    """The error's body as short text, for messages and for sniffing what a server rejected."""
    body = getattr(exc, "body", None)
    if body is None:
        text = getattr(exc, "message", None) or str(exc)
    elif isinstance(body, str):
        text = body
    else:
        try:
            text = json.dumps(body, ensure_ascii=False)
        except (TypeError, ValueError):
            text = str(body)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tool_name(name: str) -> str:
    """Providers accept only `[A-Za-z0-9_-]{1,64}` as a schema/tool name."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "reply"


def schema_instruction(schema: dict[str, Any]) -> str:
    """The schema as prompt text, for servers that cannot constrain the output themselves."""
    return (
        "\n\nReply with only a JSON object (no prose, no code fences) that matches this JSON schema:\n"
        + json.dumps(schema, ensure_ascii=False)
    )


class OpenAIModel(Model):
    """A model behind an OpenAI-compatible `/chat/completions` endpoint."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        structured: str = "auto",
        max_concurrency: int = 8,
        context_window: int = 32768,
        input_cost_per_mtok: float = 0.0,
        output_cost_per_mtok: float = 0.0,
        http_client: Any = None,
    ) -> None:
        if structured != "auto" and structured not in MODES:
            raise ConfigError(
                f"unknown structured-output mode {structured!r}: use auto or one of {', '.join(MODES)}"
            )
        try:
            import openai
        except ImportError as exc:
            raise ConfigError(NEEDS_OPENAI) from exc
        self._openai = openai
        self.model = model
        self.base_url = base_url
        self.id = f"openai:{model}@{base_url or 'api.openai.com'}"
        self.max_concurrency = max_concurrency
        self.context_window = context_window
        self.input_cost_per_mtok = input_cost_per_mtok
        self.output_cost_per_mtok = output_cost_per_mtok
        self.structured = structured
        #: the structured-output form in use: pinned, or the one that last worked in "auto" mode
        self.mode: str | None = None if structured == "auto" else structured
        self._max_tokens_param = "max_tokens"  # OpenAI's o-series/gpt-5 want "max_completion_tokens"
        self._send_temperature = True  # ... and accept only their default temperature
        self._send_logprobs = True  # a server that rejects logprobs is asked again without them
        self._client = openai.OpenAI(
            # explicit, so the SDK never reads OPENAI_BASE_URL / OPENAI_API_KEY behind the registry's back
            base_url=base_url or "https://api.openai.com/v1",
            api_key=api_key or "sk-no-key",
            timeout=timeout,
            max_retries=0,
            http_client=http_client,
        )

    def _modes(self, request: Request) -> list[str | None]:
        if not request.schema_:
            return [None]
        if self.structured != "auto":
            return [self.structured]
        start = MODES.index(self.mode) if self.mode else 0
        return list(MODES[start:])

    def _kwargs(self, request: Request, mode: str | None) -> dict[str, Any]:
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            self._max_tokens_param: request.max_tokens,
        }
        if self._send_temperature:
            kwargs["temperature"] = request.temperature
        if request.logprobs > 0 and self._send_logprobs:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = min(request.logprobs, 20)  # OpenAI's maximum
        schema = request.schema_
        if schema is None or mode is None:
            return kwargs
        if mode == "json_schema":
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": tool_name(request.schema_name), "schema": schema, "strict": False},
            }
        elif mode == "llama":
            kwargs["response_format"] = {"type": "json_object", "schema": schema}
        else:
            if mode == "json_object":
                kwargs["response_format"] = {"type": "json_object"}
            _append_to_last_user(messages, schema_instruction(schema))
        return kwargs

    def complete(self, request: Request) -> Completion:
        openai = self._openai
        modes = self._modes(request)
        i = 0
        while True:
            mode = modes[i]
            try:
                response = self._client.chat.completions.create(**self._kwargs(request, mode))
            except openai.APIStatusError as exc:
                if self._adapt_parameters(exc):
                    continue  # same form again, with the parameter this model wants
                if i + 1 < len(modes) and _rejects_schema(exc):
                    i += 1  # this server does not take this form: try the next one
                    continue
                raise self._classify(exc) from exc
            except openai.APIError as exc:  # connection errors, timeouts, unparsable responses
                raise self._classify(exc) from exc
            if mode is not None and self.structured == "auto":
                self.mode = mode
            return _completion(response)

    def _adapt_parameters(self, exc: Any) -> bool:
        """OpenAI's reasoning models reject `max_tokens` and a non-default `temperature`; adapt once."""
        if exc.status_code != 400:
            return False
        text = error_body(exc, limit=4000).lower()
        if self._max_tokens_param == "max_tokens" and "max_completion_tokens" in text:
            self._max_tokens_param = "max_completion_tokens"
            return True
        if self._send_temperature and "temperature" in text and "support" in text:
            self._send_temperature = False
            return True
        if self._send_logprobs and "logprobs" in text:
            self._send_logprobs = False  # the caller reads grades from the text instead
            return True
        return False

    def _classify(self, exc: Exception) -> Exception:
        """Map an SDK error onto knowtree's tree: transient (retry), config (user's fault), or failed."""
        openai = self._openai
        where = self.base_url or "api.openai.com"
        if isinstance(exc, openai.AuthenticationError):
            return ConfigError(f"authentication failed for {where}: set OPENAI_API_KEY or KNOWTREE_API_KEY")
        if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
            return TransientModelError(f"{self.id}: {exc.message or type(exc).__name__}")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            retry_after = parse_retry_after(exc.response.headers)
            message = f"{self.id}: HTTP {status}: {error_body(exc)}"
            if isinstance(exc, openai.RateLimitError) or status >= 500 or status in _TRANSIENT_STATUS:
                return TransientModelError(message, retry_after=retry_after)
            if status == 404:
                return ConfigError(f"{message} (check the model name and the base URL)")
            return ModelCallError(message)
        return ModelCallError(f"{self.id}: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        self._client.close()


def _rejects_schema(exc: Any) -> bool:
    """A 400/422/500 that complains about the structured-output request (llama.cpp's server answers 500)."""
    if exc.status_code not in (400, 422, 500):
        return False
    text = (error_body(exc, limit=4000) + " " + str(getattr(exc, "message", ""))).lower()
    return any(word in text for word in _SCHEMA_REJECTION)


def _append_to_last_user(messages: list[dict[str, str]], text: str) -> None:
    for message in reversed(messages):
        if message["role"] == "user":
            message["content"] += text
            return
    messages.append({"role": "user", "content": text.lstrip()})


def _completion(response: Any) -> Completion:
    choices = getattr(response, "choices", None) or []
    choice = choices[0] if choices else None
    message = getattr(choice, "message", None)
    text = getattr(message, "content", None) or ""
    usage = getattr(response, "usage", None)
    return Completion(
        text=text,
        input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        finish_reason=getattr(choice, "finish_reason", None),
        logprobs=_logprobs(choice),
    )


def _logprobs(choice: Any) -> list[TokenLogprob] | None:
    """`choices[0].logprobs.content` (OpenAI's form, also llama.cpp's server) as TokenLogprobs."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:
        return None
    return [
        TokenLogprob(
            token=str(getattr(item, "token", "")),
            logprob=float(getattr(item, "logprob", 0.0) or 0.0),
            top=[
                (str(getattr(t, "token", "")), float(getattr(t, "logprob", 0.0) or 0.0))
                for t in (getattr(item, "top_logprobs", None) or [])
            ],
        )
        for item in content
    ]
