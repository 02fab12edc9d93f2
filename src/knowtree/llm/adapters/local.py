"""The embedded model: llama-cpp-python running a GGUF in this process, offline.

Loading takes seconds and ~2 GB of RAM, so it happens on the first call, not at construction. A llama.cpp
context is not thread-safe, so one lock guards loading and every call (`max_concurrency = 1`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from knowtree.errors import ConfigError, ModelCallError
from knowtree.llm.adapters.model_files import (
    DEFAULT_LOCAL_MODEL,
    ensure_local_model,
    is_default_spec,
    resolve_gguf,
)
from knowtree.llm.base import Completion, Model, Request, TokenLogprob

NEEDS_LLAMA_CPP = 'the embedded model needs llama-cpp-python: pip install "knowtree[local]"'

#: Qwen's chat template injects "You are Qwen, created by Alibaba Cloud…" when no system message is sent.
DEFAULT_SYSTEM = "You are a precise assistant."

#: chat-template tokens per message (role markers, separators) on top of the contents themselves
_TEMPLATE_TOKENS_PER_MESSAGE = 8


def _default_threads() -> int:
    """`KNOWTREE_THREADS`, else every core: thread count is the main speed knob on CPU."""
    env = os.environ.get("KNOWTREE_THREADS")
    if env:
        try:
            value = int(env)
        except ValueError:
            value = 0
        if value < 1:
            raise ConfigError(f"KNOWTREE_THREADS must be a positive integer, got {env!r}")
        return value
    return os.cpu_count() or 1


def _chat_messages(request: Request) -> list[dict[str, str]]:
    """Messages with exactly one system message, first (Qwen's template only honours a leading one)."""
    system = [m.content for m in request.messages if m.role == "system"]
    rest = [{"role": m.role, "content": m.content} for m in request.messages if m.role != "system"]
    return [{"role": "system", "content": "\n\n".join(system) if system else DEFAULT_SYSTEM}, *rest]


class LogitTap:
    """Records, at every generated token, the `top` most likely tokens with their log-probabilities.

    llama-cpp-python reports logprobs only for a model loaded with `logits_all=True`, which keeps
    the logits of every prompt token (n_ctx × 152k floats, ~5 GB at 8k context). A logits processor
    sees the same raw logits of the token being generated (before the grammar and the repeat
    penalty) at no memory cost; it returns them unchanged."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.steps: list[tuple[int, list[tuple[int, float]]]] = []  # (tokens so far, [(id, logprob)])

    def __call__(self, input_ids: Any, logits: Any) -> Any:
        import numpy as np

        x = np.asarray(logits, dtype=np.float64)
        peak = float(x.max())
        log_total = peak + float(np.log(np.exp(x - peak).sum()))
        k = min(self.top, x.size)
        best = np.argpartition(-x, k - 1)[:k]
        best = best[np.argsort(-x[best])]
        self.steps.append((len(input_ids), [(int(t), float(x[t]) - log_total) for t in best]))
        return logits

    def tokens(self, generated: list[int], detokenize: Callable[[int], str]) -> list[TokenLogprob]:
        """The reply's tokens (ids in `generated`, the context's tokens from the first reply token on)
        with their logprobs; a step whose token was never evaluated (the last one) is left out."""
        out: list[TokenLogprob] = []
        start = self.steps[0][0] if self.steps else 0
        for n, top in self.steps:
            i = n - start
            if i >= len(generated):
                break
            chosen = generated[i]
            alternatives = dict(top)
            out.append(
                TokenLogprob(
                    token=detokenize(chosen),
                    logprob=alternatives.get(chosen, min(alternatives.values(), default=0.0)),
                    top=[(detokenize(t), lp) for t, lp in top],
                )
            )
        return out


class LocalModel(Model):
    """A GGUF model run in-process by llama-cpp-python (the default, offline model)."""

    max_concurrency = 1
    free = True  # nothing is billed: a cost cap holds without prices

    def __init__(
        self,
        gguf: str | None = None,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        seed: int = 0,
    ) -> None:
        # An explicit file is checked now (cheap); the default is assembled lazily (1.1 GB of copying).
        self._path: Path | None = None if is_default_spec(gguf) else resolve_gguf(gguf)
        stem = DEFAULT_LOCAL_MODEL if self._path is None else self._path.stem
        self.id = f"local:{stem}"
        self.context_window = n_ctx
        self.n_ctx = n_ctx
        self.n_threads = n_threads if n_threads is not None else _default_threads()
        self.seed = seed
        self._llm: Any = None
        self._lock = threading.Lock()

    @property
    def path(self) -> Path | None:
        """The GGUF file, once known (the default model's path is known after loading)."""
        return self._path

    def load(self) -> None:
        """Load the model now instead of on the first call (e.g. to fail early or warm up)."""
        with self._lock:
            self._ensure_loaded()

    def _ensure_loaded(self) -> Any:
        if self._llm is not None:
            return self._llm
        try:
            import llama_cpp
        except ImportError as exc:
            raise ConfigError(NEEDS_LLAMA_CPP) from exc
        if self._path is None:
            self._path = ensure_local_model()
        try:
            self._llm = llama_cpp.Llama(
                model_path=str(self._path),
                n_ctx=self.n_ctx,  # the library default is 512: far too small
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,
                seed=self.seed,
                verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ConfigError(f"cannot load the model file {self._path}: {exc}") from exc
        return self._llm

    def _prompt_tokens(self, llm: Any, messages: list[dict[str, str]]) -> int:
        """A close estimate of the templated prompt's length, with the model's own tokenizer."""
        text = "\n".join(m["content"] for m in messages)
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        return len(tokens) + _TEMPLATE_TOKENS_PER_MESSAGE * len(messages)

    def complete(self, request: Request) -> Completion:
        return self._complete(request, None)

    def complete_streaming(self, request: Request, on_text: Callable[[str], None]) -> Completion:
        return self._complete(request, on_text)

    @staticmethod
    def _stream(
        llm: Any, kwargs: dict[str, Any], on_text: Callable[[str], None], n_prompt: int
    ) -> dict[str, Any]:
        """Stream a chat completion, handing each text piece to `on_text`; returns the usual response."""
        text: list[str] = []
        finish = None
        for chunk in llm.create_chat_completion(**kwargs, stream=True):
            choice = (chunk.get("choices") or [{}])[0]
            piece = (choice.get("delta") or {}).get("content") or ""
            if piece:
                text.append(piece)
                on_text(piece)
            finish = choice.get("finish_reason") or finish
        full = "".join(text)
        # streamed chunks carry no usage: the prompt estimate from before the call, the reply counted
        usage = {
            "prompt_tokens": n_prompt,
            "completion_tokens": len(llm.tokenize(full.encode("utf-8"), add_bos=False)),
        }
        return {"choices": [{"message": {"content": full}, "finish_reason": finish}], "usage": usage}

    def _complete(self, request: Request, on_text: Callable[[str], None] | None) -> Completion:
        messages = _chat_messages(request)
        kwargs: dict[str, Any] = {
            "messages": messages,
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
            "seed": self.seed,  # per call, so a reply does not depend on what ran before it
            # llama.cpp's usual default; without it the 1.5B model can loop ("again again again")
            "repeat_penalty": 1.1,
        }
        if request.schema_:
            # The OpenAI-style {"type": "json_schema"} form is silently ignored in-process.
            kwargs["response_format"] = {"type": "json_object", "schema": request.schema_}
        tap = LogitTap(request.logprobs) if request.logprobs > 0 and on_text is None else None
        if tap is not None:
            from llama_cpp import LogitsProcessorList

            kwargs["logits_processor"] = LogitsProcessorList([tap])
        with self._lock:
            llm = self._ensure_loaded()
            n_prompt = self._prompt_tokens(llm, messages)
            if n_prompt + request.max_tokens > self.n_ctx:
                raise ModelCallError(
                    f"prompt too long for {self.id}: about {n_prompt} prompt tokens + {request.max_tokens} "
                    f"reply tokens exceed the context window of {self.n_ctx}"
                )
            try:
                if on_text is None:
                    response = llm.create_chat_completion(**kwargs)
                else:
                    response = self._stream(llm, kwargs, on_text, n_prompt)
            except (ValueError, RuntimeError) as exc:
                raise ModelCallError(f"{self.id} failed: {exc}") from exc
            logprobs = None
            if tap is not None and tap.steps:
                ids = [int(t) for t in llm.input_ids[tap.steps[0][0] : llm.n_tokens]]

                def text_of(token: int) -> str:
                    return llm.detokenize([token]).decode("utf-8", errors="replace")

                logprobs = tap.tokens(ids, text_of)
        choices = response.get("choices") or []
        choice = choices[0] if choices else {}
        text = (choice.get("message") or {}).get("content") or ""
        usage = response.get("usage") or {}
        return Completion(
            text=text,
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
            finish_reason=choice.get("finish_reason"),
            logprobs=logprobs,
        )

    def close(self) -> None:
        """Free the model's memory; a later call loads it again."""
        with self._lock:
            llm, self._llm = self._llm, None
            if llm is not None and hasattr(llm, "close"):
                llm.close()
