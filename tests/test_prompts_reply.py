"""The one way to ask for a structured reply (`knowtree.prompts.reply`): schema derived from the model."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import StrictInt, ValidationError

from knowtree.answer.replies import Choice, Combined, read_reply
from knowtree.construct.metadata import LeafReply
from knowtree.construct.toc import TocEntry, TocReply, structure_reply
from knowtree.errors import ModelOutputError
from knowtree.llm.client import LLMClient
from knowtree.prompts import render
from knowtree.prompts.reply import Reply, ask, narrowed, reply_schema, string, strings
from knowtree.testing.models import FunctionModel


class Sample(Reply):
    reason: str = string(20)
    name: str = string(10, ..., min_length=1)
    tags: list[str] = strings(2, 5)
    pick: StrictInt


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [k for k in node if k in ("$ref", "$defs")] + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_the_schema_requires_every_field_while_validation_keeps_the_defaults() -> None:
    schema = reply_schema(Sample)
    assert schema["required"] == ["reason", "name", "tags", "pick"]
    assert list(schema["properties"]) == ["reason", "name", "tags", "pick"]  # the decoding order
    assert Sample.model_validate({"name": "x", "pick": 1}).reason == ""


def test_caps_shape_the_schema_not_the_validation() -> None:
    props = reply_schema(Sample)["properties"]
    assert props["reason"] == {"type": "string", "maxLength": 20}
    assert props["name"] == {"type": "string", "maxLength": 10}  # min_length is validated only
    assert props["tags"] == {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 2}
    long = Sample.model_validate({"reason": "r" * 50, "name": "n" * 50, "tags": ["t" * 9] * 4, "pick": 0})
    assert len(long.reason) == 50 and len(long.tags) == 4  # a backend that ignores the schema is cut later
    with pytest.raises(ValidationError):
        Sample.model_validate({"name": "", "pick": 0})


def test_a_derived_schema_is_self_contained_and_names_the_reply() -> None:
    for model in (TocReply, read_reply(2), structure_reply([3, 4])):
        schema = reply_schema(model)
        assert not _refs(schema), model
        assert schema["title"] == model.__name__
    entry = reply_schema(TocReply)["properties"]["entries"]["items"]
    assert "title" in entry["properties"] and "title" not in entry  # a property named title stays


def test_derived_schemas_equal_the_hand_written_ones_they_replaced() -> None:
    def str_list(n: int, chars: int) -> dict[str, Any]:
        return {"type": "array", "items": {"type": "string", "maxLength": chars}, "maxItems": n}

    leaf = {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "maxLength": 600},
            "content_types": str_list(3, 60),
            "critical_actions": str_list(3, 140),
            "decisions": str_list(3, 140),
            "noteworthy_events": str_list(3, 140),
            "about": str_list(10, 40),
        },
        "required": [
            "summary",
            "content_types",
            "critical_actions",
            "decisions",
            "noteworthy_events",
            "about",
        ],
    }
    part = {
        "type": "object",
        "properties": {
            "found": {"type": "boolean"},
            "quote": {"type": "string", "maxLength": 400},
            "answer": {"type": "string", "maxLength": 400},
        },
        "required": ["found", "quote", "answer"],
    }
    read = {
        "type": "object",
        "properties": {"part_1": part, "part_2": part},
        "required": ["part_1", "part_2"],
    }
    choose = {
        "type": "object",
        "properties": {
            "reason": {"type": "string", "maxLength": 240},
            "choice": {"type": "integer", "enum": [0, 1]},
        },
        "required": ["reason", "choice"],
    }
    for old, model in (
        (leaf, LeafReply),
        (read, read_reply(2)),
        (choose, narrowed(Choice, choice={"enum": [0, 1]})),
    ):
        new = reply_schema(model)
        new.pop("title")
        assert json.dumps(new, sort_keys=True) == json.dumps(old, sort_keys=True)
        assert list(new["properties"]) == list(old["properties"])


def test_narrowed_keeps_the_name_and_the_validators_and_is_cached() -> None:
    three = narrowed(Choice, choice={"enum": [0, 1, 2]})
    assert three is narrowed(Choice, choice={"enum": [0, 1, 2]})
    assert three.__name__ == "Choice" and issubclass(three, Choice)
    assert reply_schema(three)["properties"]["choice"]["enum"] == [0, 1, 2]
    assert reply_schema(three)["properties"]["reason"]["maxLength"] == 240
    shorter = narrowed(Choice, reason={"maxLength": 200})
    assert reply_schema(shorter)["properties"]["reason"] == {"type": "string", "maxLength": 200}
    section = structure_reply([5]).model_validate({"sections": [{"title": "A", "page": 5, "level": "9"}]})
    assert section.sections[0].level == 3  # the base class's level clamp still applies
    assert TocEntry.model_validate({"title": "A", "page": "null"}).page is None


def test_ask_sends_the_system_message_the_template_and_the_derived_schema() -> None:
    model = FunctionModel(lambda r: {"answer": "Lisbon"})
    result = ask(
        LLMClient(model),
        Combined,
        "combine",
        question="Where?",
        findings="- x",
        purpose="combine",
        max_tokens=50,
    )
    assert result.value.answer == "Lisbon"
    request = model.requests[0]
    assert [m.role for m in request.messages] == ["system", "user"]
    assert request.messages[0].content == render("system")
    assert request.messages[1].content == render("combine", question="Where?", findings="- x")
    assert request.schema_ == reply_schema(Combined) and request.schema_name == "combine"


def test_ask_checks_the_reply_and_raises_a_typed_error() -> None:
    client = LLMClient(FunctionModel(lambda r: {"reason": "", "choice": 7}))

    def in_range(reply: Choice) -> None:
        if reply.choice > 1:
            raise ValueError("choice out of range")

    with pytest.raises(ModelOutputError, match="choose"):
        ask(
            client,
            Choice,
            "choose",
            breadcrumb="",
            memory="",
            question="q",
            options="",
            purpose="choose",
            max_tokens=20,
            check=in_range,
        )
