"""The evaluation harness's seams: reply schemas derived from their pydantic classes, its own prompt
templates, method modules that import only downward, and run bookkeeping through `KnowTree.run`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

import knowtree_eval
from knowtree import prompts as kt_prompts
from knowtree.errors import ModelOutputError
from knowtree.testing.models import FunctionModel, KeywordModel
from knowtree_eval import prompts
from knowtree_eval.judge import JUDGE_SCHEMA, Verdict
from knowtree_eval.raptor import SUMMARY_SCHEMA, SummaryReply
from knowtree_eval.runtime import ANSWER_SCHEMA, AnswerReply, Runtime

PACKAGE = Path(knowtree_eval.__file__).parent


# the schemas the harness once wrote by hand beside each class: the derived ones must equal them
# (same decoding for a constrained model, same cache keys for the calls they shape)
HAND_WRITTEN = [
    (
        ANSWER_SCHEMA,
        AnswerReply,
        {
            "type": "object",
            "properties": {"answer": {"type": "string", "maxLength": 400}},
            "required": ["answer"],
        },
    ),
    (
        JUDGE_SCHEMA,
        Verdict,
        {
            "type": "object",
            "properties": {"reason": {"type": "string", "maxLength": 300}, "correct": {"type": "boolean"}},
            "required": ["reason", "correct"],
        },
    ),
    (
        SUMMARY_SCHEMA,
        SummaryReply,
        {
            "type": "object",
            "properties": {"summary": {"type": "string", "maxLength": 900}},
            "required": ["summary"],
        },
    ),
]


@pytest.mark.parametrize(("schema", "model", "hand"), HAND_WRITTEN)
def test_reply_schemas_are_derived_and_equal_the_hand_written_ones(
    schema: dict, model: type[BaseModel], hand: dict
) -> None:
    assert schema == prompts.reply_schema(model) == hand
    assert list(schema["properties"]) == list(hand["properties"])  # the order a decoder writes them in
    field, cap = next((n, f["maxLength"]) for n, f in hand["properties"].items() if "maxLength" in f)
    # the cap shapes the schema only: validation stays as lenient as it was
    assert getattr(model.model_validate({field: "x" * (cap + 1), "correct": True}), field)


def test_reply_validation_is_unchanged() -> None:
    with pytest.raises(ValidationError):
        AnswerReply.model_validate({"answer": ""})
    with pytest.raises(ValidationError):
        SummaryReply.model_validate({"summary": ""})
    assert Verdict.model_validate({"correct": True}).reason == ""


def test_eval_prompts_live_with_the_harness() -> None:
    for name in ("eval_answer", "judge", "raptor_summary"):
        assert (PACKAGE / "prompts" / f"{name}.txt").is_file()
        with pytest.raises(FileNotFoundError):  # knowtree itself does not carry them any more
            kt_prompts.render(name)
    system, user = prompts.messages("judge", question="Q?", gold="G", prediction="P")
    assert system.role == "system" and system.content == kt_prompts.render("system")
    assert user.role == "user" and "Q?" in user.content and "G" in user.content
    assert prompts.render("raptor_summary", text="TEXT") == user_text("raptor_summary", "TEXT")


def user_text(name: str, text: str) -> str:
    return (PACKAGE / "prompts" / f"{name}.txt").read_text(encoding="utf-8").replace("$text", text).strip()


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_method_modules_import_only_downward() -> None:
    """The registry (`methods.py`) and the runner sit on top: no method module imports them back."""
    above = {"knowtree_eval.methods", "knowtree_eval.runner", "knowtree_eval.execute"}
    for name in ("base", "scoring", "retrieval", "treemethod", "navmethod", "llm_methods", "runtime"):
        assert not _imports(PACKAGE / f"{name}.py") & above, name
    # and knowtree never imports the harness (the `knowtree eval` command aside)
    src = PACKAGE.parent / "knowtree"
    users = [p for p in src.rglob("*.py") if any(i.startswith("knowtree_eval") for i in _imports(p))]
    assert [p.relative_to(src).as_posix() for p in users] == ["cli/eval.py"]


def test_question_runs_are_closed_ok_or_failed(tmp_path: Path) -> None:
    runtime = Runtime(db=str(tmp_path / "kt.db"), model_object=KeywordModel())
    with runtime.question("eval", "m:c", "fine?") as (_, ok_id):
        pass
    with pytest.raises(RuntimeError), runtime.question("eval", "m:c", "broken?") as (_, failed_id):
        raise RuntimeError("boom")
    status = {r["id"]: r["status"] for r in runtime.kt().store.runs()}
    runtime.close()
    assert status[ok_id] == "ok" and status[failed_id] == "failed"


def test_a_failed_judge_is_a_recorded_error_and_a_failed_run(tmp_path: Path) -> None:
    from knowtree_eval.datasets import Case
    from knowtree_eval.execute import judge_record
    from knowtree_eval.scoring import base_record

    def no_json(request: object) -> str:
        return "not json"

    runtime = Runtime(
        db=str(tmp_path / "kt.db"), model_object=KeywordModel(), judge_object=FunctionModel(no_json)
    )
    case = Case(id="q", question="Where?", corpus="c", answer="Lisbon")
    record = base_record(case, "walk")
    record.prediction, record.llm_calls = "Oslo", 1
    judge_record(record, case, runtime)
    judge_kt = runtime.judge_kt()
    assert judge_kt is not None
    runs = judge_kt.store.runs()
    runtime.close()
    assert record.metrics["judged"] is None and record.error and record.error.startswith("judge: ")
    assert ModelOutputError.__name__ in record.error
    assert [(r["kind"], r["status"]) for r in runs if r["kind"] == "judge"] == [("judge", "failed")]
