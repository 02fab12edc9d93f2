"""The docs that are generated from the code and the results files stay current (docs/hooks/gen.py),
the README stays short, every error class has its troubleshooting entry, and the version has one source."""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

import knowtree
from knowtree import errors

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return _load("docs_gen", ROOT / "docs" / "hooks" / "gen.py")


@pytest.fixture
def render() -> ModuleType:
    return _load("render_results", ROOT / "benchmarks" / "render_results.py")


def test_generated_files_are_current(gen: ModuleType) -> None:
    stale = [str(p.relative_to(ROOT)) for p in gen.stale()]
    assert not stale, f"run `python docs/hooks/gen.py`: stale {stale}"


def test_configuration_names_every_setting_and_variable(gen: ModuleType) -> None:
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")
    for name in knowtree.Settings.model_fields:
        assert f"`KNOWTREE_{name.upper()}`" in page
    for name in gen._src_env_names():
        assert f"`{name}`" in page


def test_an_undocumented_environment_variable_fails_the_generator(gen: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    found = {**gen._src_env_names(), "KNOWTREE_SOMETHING_NEW": {"knowtree.x"}}
    monkeypatch.setattr(gen, "_src_env_names", lambda: found)
    with pytest.raises(SystemExit, match="KNOWTREE_SOMETHING_NEW"):
        gen.configuration_md()


def test_cli_reference_lists_every_command(gen: ModuleType) -> None:
    import typer

    from knowtree.cli.app import app

    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        subs = getattr(command, "commands", None)
        for full in [f"{name} {s}" for s in subs] if subs else [name]:
            assert f"## `knowtree {full}`" in page


def test_results_tables_match_their_files(render: ModuleType) -> None:
    data = json.loads((ROOT / "benchmarks/results/tree-index/locomo/summary.json").read_text(encoding="utf-8"))
    hit = data["methods"]["tree"]["hit_by_budget"][str(data["budget"])]
    assert f"{hit:.3f}" in render.headline_md()
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert page.count("Command: `") >= 10 and page.count("Machine: ") == page.count("Date: ")


def test_a_table_without_its_results_file_fails(render: ModuleType, tmp_path: Path) -> None:
    render.HERE = tmp_path
    with pytest.raises(FileNotFoundError, match="no results file"):
        render.results_page_md()


def test_a_results_file_without_command_machine_date_fails(render: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text(json.dumps({"command": "c", "date": "2026-01-01"}), encoding="utf-8")
    render.HERE = tmp_path
    with pytest.raises(ValueError, match="lacks machine"):
        render.load("x.json")


def test_readme_is_short_and_has_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    assert "bash scripts/install.sh && .venv/bin/knowtree sample lighthouse" in readme
    assert ".venv/bin/python -m pytest -q" in readme
    for link in re.findall(r"\]\(((?:docs|benchmarks)/[^)#]+)", readme):
        assert (ROOT / link).is_file(), f"README links to a missing file: {link}"


def test_every_error_class_has_a_troubleshooting_entry() -> None:
    page = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    classes = [n for n, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.KnowtreeError)]
    missing = [n for n in classes if n != "KnowtreeError" and f"### `{n}`" not in page]
    assert not missing, f"docs/troubleshooting.md needs a section for {missing}"


def test_the_version_has_one_source() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["hatch"]["version"]["path"] == "src/knowtree/__init__.py"
    result = CliRunner().invoke(_app(), ["--version"])
    assert result.output.strip() == f"knowtree {knowtree.__version__}"
    assert f"## {knowtree.__version__}" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def _app():  # type: ignore[no-untyped-def]
    from knowtree.cli.app import app

    return app
