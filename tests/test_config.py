"""Settings precedence and validation, model strings, and what importing knowtree loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from knowtree.config import Settings
from knowtree.errors import ConfigError
from knowtree.llm.registry import MODEL_FORMS, resolve_model
from knowtree.testing.models import KeywordModel


def write_toml(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body, encoding="utf-8")
    return path


# -- precedence ------------------------------------------------------------------------------------


def test_defaults_without_any_source() -> None:
    s = Settings.load(env={})
    assert s.model == "local" and s.db == "knowtree.db" and s.chunk_size == 5000 and s.taxonomy is None


def test_file_then_env_then_overrides(tmp_path: Path) -> None:
    config = write_toml(
        tmp_path / "k.toml",
        '[knowtree]\nmodel = "keyword"\nchunk_size = 1000\nconcurrency = 2\nmax_children = 6\n',
    )
    env = {"KNOWTREE_CHUNK_SIZE": "2000", "KNOWTREE_CONCURRENCY": "3"}
    s = Settings.load({"concurrency": 5, "db": None}, env=env, config_file=config)
    assert s.model == "keyword"  # file only
    assert s.max_children == 6  # file only
    assert s.chunk_size == 2000  # env beats file
    assert s.concurrency == 5  # override beats env and file
    assert s.db == "knowtree.db"  # None means "not given"


def test_flat_config_file_without_a_table(tmp_path: Path) -> None:
    config = write_toml(tmp_path / "k.toml", 'model = "keyword"\n')
    assert Settings.load(env={}, config_file=config).model == "keyword"


def test_config_file_locations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = write_toml(tmp_path / "xdg" / "knowtree" / "config.toml", 'model = "from-user"\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert Settings.load(env=env).model == "from-user"
    write_toml(tmp_path / "knowtree.toml", 'model = "from-cwd"\n')  # conftest chdir'ed into tmp_path
    assert Settings.load(env=env).model == "from-cwd"
    explicit = write_toml(tmp_path / "explicit.toml", 'model = "from-env-var"\n')
    assert Settings.load(env={**env, "KNOWTREE_CONFIG": str(explicit)}).model == "from-env-var"
    assert user.exists()


def test_real_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KNOWTREE_MODEL", "keyword")
    monkeypatch.setenv("KNOWTREE_MAX_CHILDREN", "5")
    s = Settings.load()
    assert s.model == "keyword" and s.max_children == 5


def test_empty_env_value_is_ignored() -> None:
    assert Settings.load(env={"KNOWTREE_MODEL": ""}).model == "local"


def test_taxonomy_from_env_is_comma_separated() -> None:
    s = Settings.load(env={"KNOWTREE_TAXONOMY": "Recipes,Poems,Other"})
    assert s.taxonomy == ["Recipes", "Poems", "Other"]


def test_taxonomy_from_env_ignores_spaces_after_commas() -> None:
    s = Settings.load(env={"KNOWTREE_TAXONOMY": "Recipes, Poems , Other,"})
    assert s.taxonomy == ["Recipes", "Poems", "Other"]


# -- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "field"),
    [
        ({"chunk_size": 10}, "chunk_size"),
        ({"max_children": 1}, "max_children"),
        ({"max_children": 100}, "max_children"),
        ({"concurrency": 0}, "concurrency"),
        ({"timeout": -1}, "timeout"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_invalid_override_is_a_config_error(source: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.load(source, env={})
    message = str(info.value)
    assert field in message and "\n" not in message


def test_invalid_env_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="chunk_size"):
        Settings.load(env={"KNOWTREE_CHUNK_SIZE": "big"})


def test_broken_config_file_is_a_config_error(tmp_path: Path) -> None:
    config = write_toml(tmp_path / "bad.toml", "model = \n")
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        Settings.load(env={}, config_file=config)
    with pytest.raises(ConfigError, match=r"missing\.toml"):
        Settings.load(env={}, config_file=tmp_path / "missing.toml")


def test_unknown_key_in_config_file_is_a_config_error(tmp_path: Path) -> None:
    config = write_toml(tmp_path / "k.toml", "[knowtree]\nchunksize = 100\n")
    with pytest.raises(ConfigError, match="chunksize"):
        Settings.load(env={}, config_file=config)


def test_overlap_larger_than_half_the_chunk_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="overlap"):
        Settings.load({"chunk_size": 200, "chunk_overlap": 150}, env={})


def test_api_key_is_not_in_repr() -> None:
    s = Settings.load({"api_key": "sk-secret-123"}, env={})
    assert "sk-secret-123" not in repr(s)


# -- model strings ---------------------------------------------------------------------------------


def resolve(spec: str, env: dict[str, str] | None = None, **settings: object):
    return resolve_model(Settings.load({"model": spec, **settings}, env={}), env=env or {})


def test_keyword_model() -> None:
    assert isinstance(resolve("keyword"), KeywordModel)
    assert isinstance(resolve("  Keyword "), KeywordModel)


def test_the_keyword_and_slow_models_take_the_concurrency_asked_for() -> None:
    """`--concurrency 8` with the slow model (a remote model's stand-in in the scale benchmarks) runs
    8 calls at once; the fakes' own cap of 4 used to halve it without a word."""
    from knowtree.llm.client import ClientOptions, LLMClient

    for spec in ("slow:0.05", "keyword"):
        model = resolve(spec, concurrency=8)
        assert model.max_concurrency == 8
        assert LLMClient(model, options=ClientOptions(concurrency=8)).concurrency == 8
    assert resolve("slow", concurrency=2).max_concurrency == 2


def test_openai_without_key_or_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        resolve("openai:gpt-x")
    assert "OPENAI_API_KEY" in str(info.value)


def test_openai_with_a_key_or_a_url() -> None:
    pytest.importorskip("openai")
    with_key = resolve("openai:gpt-x", env={"OPENAI_API_KEY": "sk-test"})
    assert with_key.id == "openai:gpt-x@api.openai.com"
    inline = resolve("openai:qwen@http://127.0.0.1:8000/v1")
    assert inline.base_url == "http://127.0.0.1:8000/v1" and inline.id.startswith("openai:qwen@")
    flag = resolve("openai:qwen", base_url="http://127.0.0.1:9000/v1")
    assert flag.base_url == "http://127.0.0.1:9000/v1"


def test_openai_without_a_model_name() -> None:
    with pytest.raises(ConfigError, match="name the model"):
        resolve("openai:", env={"OPENAI_API_KEY": "sk-test"})


def test_ollama_points_at_the_local_server() -> None:
    pytest.importorskip("openai")
    model = resolve("ollama:llama3")
    assert model.base_url == "http://127.0.0.1:11434/v1"
    assert model.model == "llama3"


def test_ollama_ignores_the_openai_base_url_variable() -> None:
    pytest.importorskip("openai")
    env = {"OPENAI_BASE_URL": "https://api.openai.com/v1", "OPENAI_API_KEY": "sk-test"}
    assert resolve("ollama:llama3", env=env).base_url == "http://127.0.0.1:11434/v1"


def test_ollama_honours_an_explicit_base_url() -> None:
    pytest.importorskip("openai")
    assert (
        resolve("ollama:llama3", base_url="http://127.0.0.1:9999/v1").base_url == "http://127.0.0.1:9999/v1"
    )
    assert resolve("ollama:llama3@http://127.0.0.1:8888/v1").base_url == "http://127.0.0.1:8888/v1"


def test_anthropic_without_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        resolve("anthropic:claude-x")
    assert "ANTHROPIC_API_KEY" in str(info.value)
    with pytest.raises(ConfigError, match="name the model"):
        resolve("anthropic:", env={"ANTHROPIC_API_KEY": "k"})


def test_anthropic_with_key() -> None:
    pytest.importorskip("anthropic")
    model = resolve("anthropic:claude-x", env={"ANTHROPIC_API_KEY": "k"})
    assert "claude-x" in model.id


@pytest.mark.parametrize("spec", ["gpt-4o", "mistral:7b", "loca"])
def test_unknown_model_lists_the_forms(spec: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve(spec)
    message = str(info.value)
    assert spec in message
    for form, _ in MODEL_FORMS:
        assert form in message
    assert "\n" not in message


def test_local_model_is_lazy_and_not_loaded() -> None:
    model = resolve("local")
    assert model.id.startswith("local:") and model.max_concurrency == 1
    # conftest refuses loading the real model in this test; resolving alone must not load it


# -- imports ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["knowtree", "knowtree.llm.registry", "knowtree.cli.app"])
def test_importing_knowtree_loads_no_optional_library(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        "heavy = ['openai', 'anthropic', 'llama_cpp', 'rich', 'httpx', 'json_repair', 'charset_normalizer']\n"
        "print(' '.join(m for m in heavy if m in sys.modules) or 'none')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["none"]
