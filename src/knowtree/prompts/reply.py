"""Asking the model for a structured reply: one system message, one template, one pydantic model.

`ask(client, Model, "template", purpose=..., max_tokens=..., **values)` renders the template, sends it
after the shared system message, and returns the reply validated into `Model` (`LLMClient.structured`
repairs or raises). The JSON schema sent with the request, which a local model turns into a grammar,
is derived from the model by `reply_schema`: there is no hand-written schema beside a reply class.

Constraints live on the fields: `string(n)` (at most n characters), `strings(items, n)`,
`at_most(items)`, `one_of(values)`. They shape the schema only: a constrained decoder stops there,
while validation stays as lenient as the field's type, since a backend without constrained decoding
may ignore the schema (what its reply holds is cut or checked by the caller, as before). A reply class
derives from `Reply`, whose schema requires every field even where the model gives a default, so a
constrained model always writes each one. `narrowed(Model, field=...)` adds per-call constraints (the
option numbers actually shown, say) to a subclass with the same name.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from knowtree.llm.base import Message
from knowtree.prompts import render

if TYPE_CHECKING:
    from knowtree.llm.client import CallResult, LLMClient

M = TypeVar("M", bound=BaseModel)


def system() -> Message:
    """The system message every structured call starts with (the `system` template)."""
    return Message(role="system", content=render("system"))


def _require_every_field(schema: dict[str, Any]) -> None:
    schema["required"] = list(schema.get("properties", {}))


class Reply(BaseModel):
    """A model's JSON reply whose schema requires every field (validation keeps the defaults)."""

    model_config = ConfigDict(json_schema_extra=_require_every_field)


# -- field constraints (schema only) ------------------------------------------------------------
def string(max_chars: int, default: Any = "", **kwargs: Any) -> Any:
    """A string field the schema caps at `max_chars` characters (pass `...` as default: required).

    A `min_length` is checked by validation only: the schema shows the cap alone, as the schemas
    written by hand before did, so a constrained model decodes exactly as it did then."""

    def cap(schema: dict[str, Any]) -> None:
        schema.pop("minLength", None)
        schema["maxLength"] = max_chars

    return Field(default, json_schema_extra=cap, **kwargs)


def strings(max_items: int, max_chars: int) -> Any:
    """A list of strings, empty by default, the schema caps at `max_items` of `max_chars` characters."""
    return Field(
        default_factory=list,
        json_schema_extra={"maxItems": max_items, "items": {"type": "string", "maxLength": max_chars}},
    )


def at_most(max_items: int, default: Any = ..., **kwargs: Any) -> Any:
    """A list field the schema caps at `max_items` items."""
    if default is list:
        return Field(default_factory=list, json_schema_extra={"maxItems": max_items}, **kwargs)
    return Field(default, json_schema_extra={"maxItems": max_items}, **kwargs)


def one_of(values: Iterable[Any], default: Any = ...) -> Any:
    """A field the schema restricts to `values` (an enum)."""
    return Field(default, json_schema_extra={"enum": list(values)})


_EMPTY = {"", "none", "null", "n/a", "na", "nothing", "-", "no", "not applicable", "none mentioned"}


def as_list(value: Any) -> Any:
    """A reply's list field as distinct, non-empty strings: a lone string becomes a list, None and
    placeholders ("none", "n/a") are dropped. Anything else is left for validation to reject."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list):
        out = []
        for item in value:
            item_text = str(item).strip() if item is not None else ""
            if item_text.lower().strip(".") not in _EMPTY and item_text not in out:
                out.append(item_text)
        return out
    return value


def _as_list_field(cls: Any, value: Any) -> Any:
    return as_list(value)


def listed(*fields: str) -> Any:
    """A validator reading the named list fields with `as_list` (assign it in the class body)."""
    return field_validator(*fields, mode="before")(classmethod(_as_list_field))


_NARROWED: dict[tuple[Any, ...], type[BaseModel]] = {}


def narrowed(model: type[M], **fields: dict[str, Any] | Any) -> type[M]:
    """A subclass of `model` (same name, same validation) whose schema adds constraints to some fields.

    A dict value is merged into that field's schema (`choice={"enum": [0, 1, 2]}`); any other value
    replaces the field's type (`sections=list[narrowed(Section, page={"enum": pages})]`). Cached."""
    key = (
        model,
        *sorted((k, json.dumps(v, sort_keys=True) if isinstance(v, dict) else v) for k, v in fields.items()),
    )
    if key not in _NARROWED:
        definitions: dict[str, Any] = {}
        for name, value in fields.items():
            info = copy.copy(model.model_fields[name])
            annotation = info.annotation
            if isinstance(value, dict):
                info.json_schema_extra = _merged(info.json_schema_extra, value)
            else:
                annotation = value
            definitions[name] = (annotation, info)
        _NARROWED[key] = create_model(  # type: ignore[call-overload]
            model.__name__, __base__=model, __module__=model.__module__, **definitions
        )
    return _NARROWED[key]  # type: ignore[return-value]


def _merged(extra: Any, more: dict[str, Any]) -> Any:
    """A field's `json_schema_extra` (a dict, a function or None) with `more` applied after it."""
    if not callable(extra):
        return {**(extra or {}), **more}

    def both(schema: dict[str, Any]) -> None:
        extra(schema)
        schema.update(more)

    return both


# -- the schema ---------------------------------------------------------------------------------
_NOISE = ("title", "default")  # generated documentation a decoder does not need


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """The schema with every `$ref` replaced by its definition and titles/defaults dropped; a field's
    own description stays (it guides the model), a class docstring does not (it documents code)."""
    if isinstance(node, list):
        return [_inline(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = {k: v for k, v in defs[node["$ref"].rsplit("/", 1)[-1]].items() if k != "description"}
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _NOISE:
            continue
        if key == "properties":  # property names are data here, not keywords
            out[key] = {name: _inline(v, defs) for name, v in value.items()}
        else:
            out[key] = _inline(value, defs)
    return out


@lru_cache(maxsize=512)
def _schema(model: type[BaseModel]) -> str:
    raw = model.model_json_schema()
    defs = raw.pop("$defs", {})
    raw.pop("description", None)
    schema = _inline(raw, defs)
    schema["title"] = model.__name__  # the reply's name stays: fakes and logs tell replies apart by it
    return json.dumps(schema)


def reply_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema sent with a request for `model`: derived from it, self-contained (no `$ref`)."""
    return json.loads(_schema(model))  # a fresh dict: callers may keep or change it


# -- the call -----------------------------------------------------------------------------------
def ask(
    client: LLMClient,
    model: type[M],
    template: str,
    *,
    purpose: str,
    max_tokens: int,
    check: Callable[[M], None] | None = None,
    on_text: Callable[[str], None] | None = None,
    logprobs: int = 0,
    **values: object,
) -> CallResult[M]:
    """Render `template` with `values`, ask for a `model` reply, return it validated (with the
    reply's token alternatives when `logprobs` asks for them and the backend reports them).

    Raises `ModelOutputError` when the reply stays invalid (`LLMClient.structured`)."""
    messages = [system(), Message(role="user", content=render(template, **values))]
    return client.structured(
        messages,
        model,
        schema=reply_schema(model),
        purpose=purpose,
        max_tokens=max_tokens,
        check=check,
        on_text=on_text,
        logprobs=logprobs,
    )
