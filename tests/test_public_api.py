"""The public API: what `knowtree` exports, and the README-style usage working end to end."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

import knowtree
from knowtree.testing.models import KeywordModel


def test_all_lists_exactly_the_public_names() -> None:
    public = {  # dir(): `Memory` and `ChatMessage` are imported on first use (not yet in vars())
        name
        for name in dir(knowtree)
        if not name.startswith("_") and not isinstance(getattr(knowtree, name), types.ModuleType)
    }
    assert set(knowtree.__all__) == public
    assert len(knowtree.__all__) == len(set(knowtree.__all__))
    assert knowtree.__all__ == sorted(knowtree.__all__)


def test_public_names_belong_to_knowtree() -> None:
    for name in knowtree.__all__:
        value = getattr(knowtree, name)
        assert getattr(value, "__module__", "knowtree").startswith("knowtree"), name


def test_error_hierarchy() -> None:
    e = knowtree
    assert issubclass(e.InputError, e.UserError) and issubclass(e.ConfigError, e.UserError)
    assert issubclass(e.NotFoundError, e.UserError) and issubclass(e.UserError, e.KnowtreeError)
    assert issubclass(e.ModelOutputError, e.ModelError) and issubclass(e.ModelCallError, e.ModelError)
    assert issubclass(e.TransientModelError, e.ModelCallError) and issubclass(e.StoreError, e.KnowtreeError)
    err = e.InputError("a.md", "file is empty")
    assert str(err) == "a.md: file is empty" and err.path == "a.md"


def test_readme_usage(tmp_path: Path, corpus: list[str]) -> None:
    kt = knowtree.open(tmp_path / "kb.db", model=KeywordModel())
    try:
        report = kt.build(corpus, tree="t")
        assert isinstance(report, knowtree.BuildReport)
        assert report.documents == 3 and report.leaves == 3 and report.fallbacks == 0
        answer = kt.tree("t").ask("Who approved the marketing budget?")
        assert isinstance(answer, knowtree.Answer)
        assert answer.status == "complete" and answer.answer and "Alice Chen" in answer.answer
        assert [c.file.endswith("budget.md") for c in answer.citations] == [True]
        assert [i.name for i in kt.trees()] == ["t"]
        tree = kt.tree("t")
        assert tree.root.id == report.root_id
        assert tree.node(report.root_id[:6]).id == report.root_id
    finally:
        kt.close()


def test_a_build_from_a_directory_and_a_single_path_string(tmp_path: Path, corpus: list[str]) -> None:
    with knowtree.open(tmp_path / "kb.db", model=KeywordModel()) as kt:
        assert kt.build(str(Path(corpus[0]).parent), tree="dir").documents == 3
        assert kt.build(corpus[0], tree="one").documents == 1


def test_missing_tree_and_node(tmp_path: Path, corpus: list[str]) -> None:
    with knowtree.open(tmp_path / "kb.db", model=KeywordModel()) as kt:
        with pytest.raises(knowtree.NotFoundError, match="none yet"):
            kt.tree("t")
        kt.build(corpus, tree="t")
        with pytest.raises(knowtree.NotFoundError, match=r"trees: t\)"):
            kt.tree("x")
        with pytest.raises(knowtree.NotFoundError):
            kt.tree("t").node("zzzz")
        with pytest.raises(knowtree.NotFoundError):
            kt.tree("t").node("")  # matches every node: ambiguous
        kt.delete("t")
        assert kt.trees() == []


def test_bad_input_raises_input_error_and_stores_nothing(tmp_path: Path, corpus: list[str]) -> None:
    empty = tmp_path / "empty.md"
    empty.write_text("")
    model = KeywordModel()
    with knowtree.open(tmp_path / "kb.db", model=model) as kt:
        with pytest.raises(knowtree.InputError, match=r"empty\.md"):
            kt.build([*corpus, str(empty)], tree="t")
        assert kt.trees() == [] and model.requests == []


def test_model_given_as_a_string(tmp_path: Path, corpus: list[str]) -> None:
    with knowtree.open(tmp_path / "kb.db", model="keyword") as kt:
        assert kt.settings.model == "keyword"
        assert kt.build(corpus, tree="t").usage.calls == 4


def test_settings_object_and_overrides(tmp_path: Path) -> None:
    settings = knowtree.Settings.load({"db": str(tmp_path / "a.db"), "chunk_size": 300}, env={})
    with knowtree.KnowTree(settings=settings, model=KeywordModel()) as kt:
        assert kt.settings.db.endswith("a.db") and kt.settings.chunk_size == 300
    with knowtree.KnowTree(tmp_path / "b.db", settings=settings, model=KeywordModel(), max_children=4) as kt:
        assert kt.settings.db.endswith("b.db") and kt.settings.max_children == 4
        assert kt.settings.chunk_size == 300


def test_invalid_override_with_a_settings_object_is_rejected(tmp_path: Path) -> None:
    settings = knowtree.Settings.load({"db": str(tmp_path / "a.db")}, env={})
    with pytest.raises(knowtree.ConfigError):
        knowtree.KnowTree(settings=settings, model=KeywordModel(), max_children=1).close()
