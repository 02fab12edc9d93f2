"""Issue 13, item 7: a garbled model reply is an error in the trace, never "select nothing"; wrong
types are not coerced; summaries are capped; a custom model's plain exception is a typed error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import knowtree
from knowtree.cli.app import app
from knowtree.errors import KnowtreeError, ModelCallError
from knowtree.llm.base import Completion, Model, Request
from knowtree.testing.models import FunctionModel, KeywordModel

MANUAL = (
    "# Manual\n\n## Setup\n\nPlug the device in and wait for the green light.\n\n"
    "## Warranty\n\nThe warranty lasts five years from the date of purchase.\n\n"
    "## Cleaning\n\nWipe the case with a dry cloth once a week.\n"
)
QUESTION = "How long does the warranty last?"


def model_with(overrides: dict[str, Any]) -> FunctionModel:
    keyword = KeywordModel()

    def reply(request: Request) -> Any:
        value = overrides.get(request.schema_name)
        if value is None:
            return keyword.reply(request)
        return value(request) if callable(value) else value

    return FunctionModel(reply, id="garbled")


def ask_search(tmp_path: Path, overrides: dict[str, Any]) -> knowtree.Answer:
    path = tmp_path / "manual.md"
    path.write_text(MANUAL, encoding="utf-8")
    with knowtree.open(
        tmp_path / "kb.db",
        model=model_with(overrides),
        structure="headings",
        summaries="none",
        describe=False,
    ) as kt:
        kt.build([str(path)], tree="m")
        return kt.tree("m").ask(QUESTION, mode="search")


@pytest.mark.parametrize(
    "garbled",
    [
        {"thinking": "the warranty section"},  # node_list missing: not "select nothing"
        {"thinking": "", "node_list": [True]},  # `true` is not option 1
        {"thinking": "", "node_list": "2"},  # a string is not a list of numbers
    ],
)
def test_a_garbled_search_reply_is_an_error_in_the_trace(tmp_path: Path, garbled: dict[str, Any]) -> None:
    answer = ask_search(tmp_path, {"search": garbled})
    [choose] = [s for s in answer.trace if s.action == "choose"]
    assert choose.error and "search" in choose.error  # the invalid reply is recorded
    assert "fallback" in (choose.reason or "") and "nothing" not in (choose.outcome or "")


def test_a_garbled_search_answer_is_an_error_not_no_answer(tmp_path: Path) -> None:
    answer = ask_search(tmp_path, {"search_answer": {"found": "yes", "quote": "", "answer": "five years"}})
    [read] = [s for s in answer.trace if s.action == "read"]
    assert read.error and "found" in read.error
    assert answer.status == "none" and "no usable reply" in (read.outcome or "")


def test_a_huge_summary_is_capped_and_the_cut_recorded(tmp_path: Path) -> None:
    from knowtree.construct.metadata import MAX_SUMMARY_CHARS

    keyword = KeywordModel()

    def leaf(request: Request) -> Any:
        reply = keyword.reply(request)
        return {**reply, "summary": "A very long summary. " * 10_000}  # 210,000 characters

    path = tmp_path / "notes.md"
    path.write_text("The lighthouse keeper logs the weather every evening.\n", encoding="utf-8")
    with knowtree.open(tmp_path / "kb.db", model=model_with({"leaf_meta": leaf})) as kt:
        kt.build([str(path)], tree="n")
        summaries = [n.meta.summary for n in kt.tree("n").nodes.values()]
    assert max(len(s) for s in summaries) <= MAX_SUMMARY_CHARS + 100
    assert any("cut at" in s and "209,999 characters" in s for s in summaries)


class Broken(Model):
    id = "my-broken-model"

    def complete(self, request: Request) -> Completion:
        raise RuntimeError("socket closed")


def test_a_custom_models_plain_exception_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_text("The lighthouse keeper logs the weather.\n", encoding="utf-8")
    with knowtree.open(tmp_path / "kb.db", model=Broken()) as kt, pytest.raises(ModelCallError) as err:
        kt.build([str(path)], tree="n")
    assert isinstance(err.value, KnowtreeError)
    assert "my-broken-model" in str(err.value) and "RuntimeError: socket closed" in str(err.value)


def test_the_cli_prints_one_line_for_a_broken_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "notes.md"
    path.write_text("The lighthouse keeper logs the weather.\n", encoding="utf-8")
    monkeypatch.setattr("knowtree.llm.registry.resolve_model", lambda settings, env=None: Broken())
    result = CliRunner().invoke(
        app, ["build", str(path), "--tree", "n", "--db", str(tmp_path / "kb.db"), "-q"]
    )
    assert result.exit_code == 3
    assert result.exception is None or isinstance(result.exception, SystemExit)
    out = result.output.strip().splitlines()
    assert (
        out == [f"error: {out[0][7:]}"] and "my-broken-model" in out[0] and "Traceback" not in result.output
    )


def test_a_memory_reply_with_a_number_where_a_list_belongs_is_a_validation_error() -> None:
    """Found by the fuzz test: `messages: 3.5` raised a bare TypeError inside the validator."""
    import pydantic

    from knowtree.answer.replies import MemoryReply

    for bad in (3.5, {"a": 1}):
        with pytest.raises(pydantic.ValidationError):
            MemoryReply.model_validate({"found": True, "answer": "x", "messages": bad, "superseded": []})
    assert MemoryReply.model_validate({"found": True, "answer": "x", "messages": "#3", "superseded": None}).messages == [3]
