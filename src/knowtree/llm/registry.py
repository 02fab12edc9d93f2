"""Model strings → adapters, through one table: prefix → factory (`register_model` adds to it).

A factory takes a `ModelSpec` (the string split at its first ":", the settings, the environment) and
returns a `Model`. Built-in factories import their adapter (and its SDK) only when their prefix is
asked for; a factory may also be given as a dotted path ("package.module:function"), imported on first
use, which is how the test models in `knowtree.testing` are found without `knowtree.llm` importing them.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from knowtree.config import Settings
from knowtree.errors import ConfigError
from knowtree.llm.base import Model

MODEL_FORMS: list[tuple[str, str]] = [
    ("local", "the embedded Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, in a model process of its own, offline) - the default"),
    ("local:PATH.gguf", "any GGUF file, run by llama-cpp-python in a model process of its own"),
    ("openai:MODEL", "OpenAI, or any OpenAI-compatible server with --base-url / KNOWTREE_BASE_URL"),
    ("openai:MODEL@URL", "an OpenAI-compatible server given inline (vLLM, llama.cpp server, LM Studio)"),
    ("ollama:MODEL", "Ollama's OpenAI-compatible endpoint (http://127.0.0.1:11434/v1 by default)"),
    ("anthropic:MODEL", "Anthropic (needs ANTHROPIC_API_KEY)"),
    ("keyword", "a deterministic word-overlap model shipped for tests and offline demos (no LLM)"),
    ("slow[:SECONDS]", "the keyword model, SECONDS (default 0.05) per call: for crash and load tests"),
]


@dataclass(frozen=True)
class ModelSpec:
    """A model string taken apart for a factory: "openai:gpt-4o-mini" → prefix "openai", name "gpt-4o-mini"."""

    spec: str  # the whole string, as written (stripped)
    prefix: str  # before the first ":", lower-cased
    name: str  # after the first ":" ("" when there is none)
    settings: Settings
    env: Mapping[str, str]


ModelFactory = Callable[[ModelSpec], Model]


def _local(spec: ModelSpec) -> Model:
    from knowtree.llm.adapters.local import LocalModel

    settings = spec.settings
    return LocalModel(spec.name or None, n_ctx=settings.n_ctx, n_threads=settings.threads, timeout=settings.model_timeout)


def _openai(spec: ModelSpec) -> Model:
    from knowtree.llm.adapters.openai_compat import OpenAIModel

    settings, env = spec.settings, spec.env
    name, _, inline_url = spec.name.partition("@")
    if not name:
        raise ConfigError(f"model {spec.spec!r}: name the model, e.g. openai:gpt-4o-mini")
    if spec.prefix == "ollama":  # a local server: OPENAI_* variables are for another endpoint
        base_url = inline_url or settings.base_url or "http://127.0.0.1:11434/v1"
        api_key = settings.api_key or "ollama"
    else:
        base_url = inline_url or settings.base_url or env.get("OPENAI_BASE_URL")
        api_key = settings.api_key or env.get("OPENAI_API_KEY")
    if not base_url and not api_key:
        raise ConfigError(
            f"model {spec.spec!r} needs an API key: set OPENAI_API_KEY (or KNOWTREE_API_KEY), "
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


def _anthropic(spec: ModelSpec) -> Model:
    from knowtree.llm.adapters.anthropic_model import AnthropicModel

    settings = spec.settings
    if not spec.name:
        raise ConfigError(f"model {spec.spec!r}: name the model, e.g. anthropic:claude-3-5-haiku-latest")
    api_key = settings.api_key or spec.env.get("ANTHROPIC_API_KEY")
    if not api_key:
        raise ConfigError(
            f"model {spec.spec!r} needs an API key: set ANTHROPIC_API_KEY (or KNOWTREE_API_KEY)"
        )
    return AnthropicModel(
        spec.name,
        api_key=api_key,
        base_url=settings.base_url,
        timeout=settings.timeout,
        max_concurrency=settings.concurrency,
        input_cost_per_mtok=settings.input_cost_per_mtok,
        output_cost_per_mtok=settings.output_cost_per_mtok,
    )


#: prefix → factory, or the dotted path ("module:function") of one, imported on first use
MODEL_FACTORIES: dict[str, ModelFactory | str] = {
    "local": _local,
    "openai": _openai,
    "ollama": _openai,
    "anthropic": _anthropic,
    "keyword": "knowtree.testing.models:keyword_model",
    "test": "knowtree.testing.models:keyword_model",
    "slow": "knowtree.testing.models:slow_model",
}


def register_model(
    prefix: str, factory: ModelFactory | str, *, form: str | None = None, description: str = ""
) -> None:
    """Make `PREFIX` and `PREFIX:NAME` model strings load through `factory` (a callable taking a
    `ModelSpec`, or the dotted path "module:function" of one). A new prefix is listed by
    `knowtree models` as `form` (default "PREFIX:NAME"); registering a known prefix replaces its factory."""
    key = prefix.strip().lower()
    if not key or ":" in key:
        raise ValueError(f"a model prefix is one word without ':', got {prefix!r}")
    if key not in MODEL_FACTORIES:
        MODEL_FORMS.append((form or f"{key}:NAME", description or "a registered model"))
    MODEL_FACTORIES[key] = factory


def _factory(entry: ModelFactory | str) -> ModelFactory:
    if not isinstance(entry, str):
        return entry
    module, _, attr = entry.partition(":")
    factory: ModelFactory = getattr(importlib.import_module(module), attr)
    return factory


def resolve_model(settings: Settings, env: Mapping[str, str] | None = None) -> Model:
    env = os.environ if env is None else env
    spec = (settings.model or "local").strip()
    prefix, _, name = spec.partition(":")
    entry = MODEL_FACTORIES.get(prefix.lower())
    if entry is None:
        forms = ", ".join(f for f, _ in MODEL_FORMS)
        raise ConfigError(f"unknown model {spec!r}: use one of {forms}")
    return _factory(entry)(ModelSpec(spec, prefix.lower(), name, settings, env))


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
