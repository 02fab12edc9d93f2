"""Typed settings, resolved once (file < environment < explicit values) and passed down explicitly.

Sources, lowest precedence first:
1. a TOML file: `$KNOWTREE_CONFIG`, else `./knowtree.toml`, else `$XDG_CONFIG_HOME/knowtree/config.toml`;
2. environment variables `KNOWTREE_<FIELD>` (e.g. `KNOWTREE_MODEL`, `KNOWTREE_BASE_URL`);
3. values given by the caller (CLI flags, keyword arguments); `None` means "not given".

`Settings.load(..., read_env=False)` (and `knowtree.open(db, read_env=False)`) skips 1 and 2: only
the caller's values (and an explicit `config_file`) count, whatever the environment holds.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from knowtree.errors import ConfigError

# how a question runs (`knowtree.answer.router` holds the table); how a collection picks documents
AskMode = Literal["auto", "walk", "search", "retrieve", "nav"]
CollectionStrategy = Literal["auto", "describe", "metadata", "semantic"]


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    db: str = Field("knowtree.db", description="SQLite file or postgresql:// URL")
    model: str = Field(
        "local",
        description="local | local:FILE.gguf | openai:MODEL[@BASE_URL] | ollama:MODEL | anthropic:MODEL | keyword",
    )
    base_url: str | None = Field(
        None, description="OpenAI-compatible server URL (vLLM, llama.cpp, LM Studio…)"
    )
    api_key: str | None = Field(
        None, repr=False, description="API key; else OPENAI_API_KEY / ANTHROPIC_API_KEY"
    )
    threads: int | None = Field(None, ge=1, description="CPU threads for the embedded model")
    n_ctx: int = Field(8192, ge=1024, description="context window of the embedded model")
    concurrency: int = Field(4, ge=1, description="model calls at once (the embedded model runs one)")
    # where a build's model calls run: this process's threads, or Ray tasks (knowtree.distributed)
    executor: Literal["local", "ray"] = Field(
        "local", description="local: a thread pool in this process; ray: Ray tasks on a cluster (the [ray] extra)"
    )
    ray_address: str | None = Field(
        None, description="the Ray cluster: auto | HOST:PORT | ray://HOST:PORT (none: RAY_ADDRESS, else a local one)"
    )
    timeout: float = Field(120.0, gt=0, description="seconds per HTTP model call")
    model_timeout: float = Field(
        900.0, gt=0, description="seconds the embedded model may go without a reply or a streamed piece before its process is stopped"
    )
    input_cost_per_mtok: float = Field(0.0, ge=0, description="USD per million input tokens, for the ledger")
    output_cost_per_mtok: float = Field(
        0.0, ge=0, description="USD per million output tokens, for the ledger"
    )
    chunk_size: int = Field(5000, ge=200, description="characters per leaf chunk")
    chunk_overlap: int = Field(0, ge=0, description="characters repeated from the previous chunk")
    max_children: int = Field(8, ge=2, le=32, description="children per branch (5-8 recommended)")
    max_branch_attempts: int = Field(3, ge=1)
    leaves_per_branch: int = Field(2, ge=1)
    max_retries: int = Field(4, ge=0, description="retries of a failed call (429, 5xx, timeouts)")
    repair_attempts: int = Field(2, ge=0, description="re-asks with the validation error fed back")
    taxonomy: list[str] | None = Field(None, description="content types (default: the built-in list)")
    # documents with structure (PDF, DOCX, HTML; Markdown by headings on request)
    structure: Literal["auto", "headings"] = Field(
        "auto", description="auto: PDF/DOCX/HTML by their structure, text and Markdown in chunks; headings: Markdown by headings too"
    )
    summaries: Literal["auto", "none", "lazy", "eager"] = Field(
        "auto",
        description="structured trees: none (titles only, no LLM call), lazy (when a navigator first sees a node), eager; auto: none for PDFs, eager otherwise",
    )
    node_max_pages: int = Field(2, ge=1, description="pages per leaf of a PDF tree (larger sections are split)")
    node_max_chars: int = Field(6000, ge=500, description="characters per leaf of a structured tree")
    describe: bool | None = Field(
        None,
        description="one-sentence description + metadata per document (1 call each); unset: on, except with "
        "summaries none (no model call)",
    )
    ask_mode: AskMode = Field(
        "auto",
        description="auto (retrieve, a collection's documents picked first; search on a structured tree when "
        "expert notes match; the navigator on memories), "
        "walk (navigate with backtracking), search (one call over the outline), "
        "retrieve (the tree as an index, one answer call), nav (index scores, a judged beam, one answer call)",
    )
    search_budget_tokens: int = Field(3000, ge=200, description="tokens of section text read by tree search")
    collection_strategy: CollectionStrategy = Field(
        "auto", description="how a question picks documents in a collection"
    )
    # safety: budgets per build and per question, the confirmation threshold, input and lock limits
    max_calls: int | None = Field(None, ge=0, description="model calls allowed per build / question (cache hits are free)")
    max_tokens: int | None = Field(None, ge=0, description="input + output tokens allowed per build / question")
    max_cost: float | None = Field(None, ge=0, description="USD allowed per build / question (needs the *_cost_per_mtok prices)")
    confirm_calls: int = Field(
        500, ge=0, description="a build or enrich estimated above this many model calls asks first (--yes skips)"
    )
    max_input_mb: float = Field(50.0, gt=0, description="largest text input file, in MB")
    busy_timeout: float = Field(120.0, gt=0, description="seconds to wait for another process's write lock")

    @model_validator(mode="after")
    def _overlap_fits(self) -> Settings:
        if self.chunk_overlap * 2 >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be less than half of chunk_size ({self.chunk_size})"
            )
        return self

    def describes_documents(self) -> bool:
        """Whether a structured build describes each document (1 call each): `describe` when set,
        else unless `summaries` is none, which promises a build without a model call."""
        return self.describe if self.describe is not None else self.summaries != "none"

    def with_overrides(self, **overrides: Any) -> Settings:
        """A validated copy with some values replaced (`None` means "keep")."""
        values = {**self.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
        return _validated(values)

    @classmethod
    def load(
        cls,
        overrides: Mapping[str, Any] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        config_file: str | Path | None = None,
        read_env: bool = True,
    ) -> Settings:
        """Settings from the config file, the environment and `overrides`; with `read_env=False`
        neither environment variables nor a config file found by search are read (an explicit
        `config_file` still is)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        path = _config_path(config_file, env) if read_env else (Path(config_file) if config_file else None)
        if path is not None:
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"{path}: cannot read config file ({exc})") from exc
            values.update(data.get("knowtree", data))
        for name in cls.model_fields if read_env else ():
            raw = env.get(f"KNOWTREE_{name.upper()}")
            if raw is not None and raw != "":
                values[name] = [t.strip() for t in raw.split(",") if t.strip()] if name == "taxonomy" else raw
        values.update({k: v for k, v in (overrides or {}).items() if v is not None})
        return _validated(values)


def _validated(values: dict[str, Any]) -> Settings:
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "settings"
        raise ConfigError(f"invalid setting {where}: {first['msg']}") from exc


def _config_path(explicit: str | Path | None, env: Mapping[str, str]) -> Path | None:
    if explicit:
        return Path(explicit)
    if env.get("KNOWTREE_CONFIG"):
        return Path(env["KNOWTREE_CONFIG"])
    local = Path("knowtree.toml")
    if local.is_file():
        return local
    base = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    user = base / "knowtree" / "config.toml"
    return user if user.is_file() else None
