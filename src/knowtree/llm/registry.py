"""Model strings → adapters. Imports of provider SDKs happen only for the provider asked for."""

from __future__ import annotations

import os
from collections.abc import Mapping

from knowtree.config import Settings
from knowtree.errors import ConfigError
from knowtree.llm.base import Model

MODEL_FORMS: list[tuple[str, str]] = [
    ("local", "the embedded Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, in-process, offline) - the default"),
    ("local:PATH.gguf", "any GGUF file, run in-process by llama-cpp-python"),
    ("openai:MODEL", "OpenAI, or any OpenAI-compatible server with --base-url / KNOWTREE_BASE_URL"),
    ("openai:MODEL@URL", "an OpenAI-compatible server given inline (vLLM, llama.cpp server, LM Studio)"),
    ("ollama:MODEL", "Ollama's OpenAI-compatible endpoint (http://127.0.0.1:11434/v1 by default)"),
    ("anthropic:MODEL", "Anthropic (needs ANTHROPIC_API_KEY)"),
    ("keyword", "a deterministic word-overlap model shipped for tests and offline demos (no LLM)"),
    ("slow[:SECONDS]", "the keyword model, SECONDS (default 0.05) per call: for crash and load tests"),
]


def resolve_model(settings: Settings, env: Mapping[str, str] | None = None) -> Model:
    env = os.environ if env is None else env
    spec = (settings.model or "local").strip()
    kind, _, rest = spec.partition(":")
    kind = kind.lower()
    if kind == "local":
        from knowtree.llm.adapters.local import LocalModel

        threads = settings.threads
        return LocalModel(rest or None, n_ctx=settings.n_ctx, n_threads=threads)
    if kind in ("openai", "ollama"):
        from knowtree.llm.adapters.openai_compat import OpenAIModel

        name, _, inline_url = rest.partition("@")
        if not name:
            raise ConfigError(f"model {spec!r}: name the model, e.g. openai:gpt-4o-mini")
        if kind == "ollama":  # a local server: OPENAI_* variables are for another endpoint
            base_url = inline_url or settings.base_url or "http://127.0.0.1:11434/v1"
            api_key = settings.api_key or "ollama"
        else:
            base_url = inline_url or settings.base_url or env.get("OPENAI_BASE_URL")
            api_key = settings.api_key or env.get("OPENAI_API_KEY")
        if not base_url and not api_key:
            raise ConfigError(
                f"model {spec!r} needs an API key: set OPENAI_API_KEY (or KNOWTREE_API_KEY), "
                "or point --base-url at an OpenAI-compatible server"
            )
        return OpenAIModel(
            name,
            base_url=base_url,
            api_key=api_key,
            timeout=settings.timeout,
            max_concurrency=settings.concurrency,
            input_cost_per_mtok=settings.input_cost_per_mtok,
            output_cost_per_mtok=settings.output_cost_per_mtok,
        )
    if kind == "anthropic":
        from knowtree.llm.adapters.anthropic_model import AnthropicModel

        if not rest:
            raise ConfigError(f"model {spec!r}: name the model, e.g. anthropic:claude-3-5-haiku-latest")
        api_key = settings.api_key or env.get("ANTHROPIC_API_KEY")
        if not api_key:
            raise ConfigError(f"model {spec!r} needs an API key: set ANTHROPIC_API_KEY (or KNOWTREE_API_KEY)")
        return AnthropicModel(
            rest,
            api_key=api_key,
            base_url=settings.base_url,
            timeout=settings.timeout,
            max_concurrency=settings.concurrency,
            input_cost_per_mtok=settings.input_cost_per_mtok,
            output_cost_per_mtok=settings.output_cost_per_mtok,
        )
    if kind in ("keyword", "test"):
        from knowtree.testing.models import KeywordModel

        return KeywordModel()
    if kind == "slow":
        from knowtree.testing.models import SlowKeywordModel

        try:
            delay = float(rest) if rest else 0.05
        except ValueError:
            raise ConfigError(f"model {spec!r}: write slow or slow:SECONDS, e.g. slow:0.2") from None
        return SlowKeywordModel(delay)
    forms = ", ".join(f for f, _ in MODEL_FORMS)
    raise ConfigError(f"unknown model {spec!r}: use one of {forms}")


def spec_for_id(model_id: str) -> str | None:
    """The model string that loads the model a tree records by id (for trees that did not record
    their model string); None when the id cannot be loaded by name (a custom Model, an import)."""
    from knowtree.llm.adapters.model_files import DEFAULT_LOCAL_MODEL

    kind, _, rest = model_id.partition(":")
    if model_id in ("keyword", "test"):
        return "keyword"
    if model_id == "keyword-slow":
        return "slow"
    if kind == "local":
        return "local" if rest == DEFAULT_LOCAL_MODEL else None
    if kind == "anthropic" and rest:
        return model_id
    if kind == "openai" and rest:
        name, _, url = rest.partition("@")
        return f"openai:{name}" if url in ("", "api.openai.com") else f"openai:{name}@{url}"
    return None
