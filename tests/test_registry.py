"""The model registry's table: prefix → factory, extended with `register_model`; the shipped fakes
load through it by dotted path, so `import knowtree` does not import `knowtree.testing`."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from knowtree.config import Settings
from knowtree.errors import ConfigError
from knowtree.llm import Completion, Model, ModelSpec, Request, register_model, registry
from knowtree.testing.models import KeywordModel, SlowKeywordModel


class EchoModel(Model):
    def __init__(self, name: str, prefix: str) -> None:
        self.id = f"{prefix}:{name}"

    def complete(self, request: Request) -> Completion:
        return Completion(text=request.messages[-1].content)


@pytest.fixture(autouse=True)
def own_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test stay in that test."""
    monkeypatch.setattr(registry, "MODEL_FACTORIES", dict(registry.MODEL_FACTORIES))
    monkeypatch.setattr(registry, "MODEL_FORMS", list(registry.MODEL_FORMS))


def resolve(spec: str) -> Model:
    return registry.resolve_model(Settings.load({"model": spec}, env={}), env={})


def test_register_model_plugs_in_an_adapter() -> None:
    seen: list[ModelSpec] = []

    def factory(spec: ModelSpec) -> Model:
        seen.append(spec)
        return EchoModel(spec.name, spec.prefix)

    register_model("echo", factory, description="repeats the prompt")
    model = resolve("Echo:loud@v2")
    assert isinstance(model, EchoModel) and model.id == "echo:loud@v2"
    assert (seen[0].prefix, seen[0].name, seen[0].spec) == ("echo", "loud@v2", "Echo:loud@v2")
    assert ("echo:NAME", "repeats the prompt") in registry.MODEL_FORMS


def test_a_registered_prefix_is_listed_by_the_cli() -> None:
    from knowtree.cli.app import app

    register_model("echo", lambda spec: EchoModel(spec.name, spec.prefix), form="echo[:NAME]")
    result = CliRunner().invoke(app, ["models"])
    assert result.exit_code == 0 and "echo[:NAME]" in result.stdout


def test_a_factory_given_as_a_dotted_path_is_imported_on_use() -> None:
    register_model("kw", "knowtree.testing.models:keyword_model")
    assert isinstance(resolve("kw"), KeywordModel)


def test_registering_a_known_prefix_replaces_its_factory() -> None:
    forms = list(registry.MODEL_FORMS)
    register_model("keyword", lambda spec: EchoModel("x", "keyword"))
    assert isinstance(resolve("keyword"), EchoModel)
    assert forms == registry.MODEL_FORMS


@pytest.mark.parametrize("prefix", ["", "a:b"])
def test_a_prefix_is_one_word(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        register_model(prefix, lambda spec: EchoModel("x", "x"))


def test_the_shipped_fakes_resolve_by_their_strings() -> None:
    assert isinstance(resolve("test"), KeywordModel)
    slow = resolve("slow:0.2")
    assert isinstance(slow, SlowKeywordModel) and slow.delay == 0.2
    with pytest.raises(ConfigError, match="slow:SECONDS"):
        resolve("slow:fast")


def test_importing_knowtree_does_not_import_the_fakes() -> None:
    code = "import sys, knowtree, knowtree.llm; print([m for m in sys.modules if 'knowtree.testing' in m])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
