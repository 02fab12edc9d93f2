"""The evaluation harness's prompt templates: the reader's answer (`eval_answer.txt`), the judge
(`judge.txt`) and RAPTOR's cluster summaries (`raptor_summary.txt`), and the JSON schemas of their
replies, derived from the pydantic reply classes.

They live with the harness because knowtree itself never uses them. Rendering is knowtree's own
(`knowtree.prompts.render`, `$name` placeholders), pointed at this package; the system prompt is
knowtree's, so every method is asked in the same voice. May import: knowtree.prompts, knowtree.llm.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from knowtree import prompts
from knowtree.llm.base import Message


def render(name: str, **values: object) -> str:
    """Fill the harness template `name` (a file `name.txt` here); a missing value raises KeyError."""
    return prompts.render(name, package=__package__, **values)


def messages(name: str, **values: object) -> list[Message]:
    """knowtree's system prompt, then the harness template `name` filled with `values` as the user turn."""
    return [
        Message(role="system", content=prompts.render("system")),
        Message(role="user", content=render(name, **values)),
    ]


def capped(max_chars: int, default: Any = ..., **kwargs: Any) -> Any:
    """A string field the reply schema caps at `max_chars` characters. The cap, like a `min_length`,
    shapes what a constrained decoder writes; validation checks `min_length` only (as before: a
    backend that ignores the schema is not refused for a long reply)."""

    def cap(schema: dict[str, Any]) -> None:
        schema.pop("minLength", None)
        schema["maxLength"] = max_chars

    return Field(default, json_schema_extra=cap, **kwargs)


def reply_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema sent with a request for `model` (a flat reply class): derived from it, less the
    titles and defaults pydantic documents, so it is the schema the harness once wrote by hand (and
    the calls it shapes keep their cache keys)."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    for field in schema.get("properties", {}).values():
        field.pop("title", None)
        field.pop("default", None)
    return schema
