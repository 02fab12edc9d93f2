"""The shapes of the model's replies while answering over a tree or a memory (pydantic models).

Each class is the only source of its reply's JSON schema (`knowtree.prompts.reply.reply_schema`);
limits that depend on the call (the option numbers shown) are added per call with `narrowed`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, StrictBool, StrictInt, create_model, field_validator

from knowtree.prompts.reply import Reply, at_most, reply_schema, string


class Choice(Reply):
    """Pick one of the numbered options (a tree's children, a memory's topics)."""

    reason: str = string(240)
    choice: StrictInt  # `true` is not option 1


class Parts(Reply):
    """A question split into the parts to look for separately (`maxItems` set per call)."""

    parts: list[str] = Field(min_length=1, json_schema_extra={"items": {"type": "string", "maxLength": 200}})


class PartReply(Reply):
    """What one leaf says about one part of the question."""

    found: StrictBool  # required: a garbled part is repaired or an error, not "not found"
    quote: str = string(400)
    answer: str = string(400)


class Combined(Reply):
    """One answer written from the findings of several parts."""

    answer: str = string(800, ..., min_length=1)


_READ_REPLIES: dict[int, type[BaseModel]] = {}


def read_reply(k: int) -> type[BaseModel]:
    """The reply to reading a leaf for `k` missing parts: `part_1` … `part_k`, each a `PartReply`."""
    if k not in _READ_REPLIES:
        fields: dict[str, Any] = {f"part_{i + 1}": (PartReply, ...) for i in range(k)}
        _READ_REPLIES[k] = create_model(f"ReadReply{k}", __base__=Reply, **fields)
    return _READ_REPLIES[k]


class MemoryReply(Reply):
    """A memory's answer: found or not, the answer, the message numbers it rests on and those it
    replaces (numbers written loosely, "#12" or "[3]", are read as numbers)."""

    found: StrictBool
    answer: str = string(300)
    messages: list[int] = at_most(6, list)
    superseded: list[int] = at_most(4, list)

    @field_validator("messages", "superseded", mode="before")
    @classmethod
    def _ints(cls, v: Any) -> Any:
        if v is None:
            return []
        if isinstance(v, int | str):
            v = [v]
        if not isinstance(v, list | tuple):
            return v  # a number with a fraction, an object…: validation rejects it with a typed error
        out = []
        for x in v:
            try:
                out.append(int(str(x).strip(" []#")))
            except ValueError:
                continue
        return out


ANSWER_SCHEMA: dict[str, Any] = reply_schema(MemoryReply)  # derived: kept for benchmarks and tests
