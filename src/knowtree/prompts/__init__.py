"""Prompt templates live in files beside this module (`$name` placeholders, `string.Template`).

Keeping them out of the code makes them reviewable and diffable, and every template's text is part of
the cache key of the calls it produces, so editing one invalidates exactly the calls it shaped.
`prompts.reply` renders a template, calls the client and validates the reply (schema derived from
its pydantic model). May import: llm (message types), text, types, errors.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from string import Template


@cache
def _template(name: str, package: str | None = None) -> Template:
    text = resources.files(package or __package__).joinpath(f"{name}.txt").read_text(encoding="utf-8")
    return Template(text)


def render(name: str, *, package: str | None = None, **values: object) -> str:
    """Fill template `name` (a file `name.txt` here, or in `package`); a missing value raises KeyError."""
    return _template(name, package).substitute({k: str(v) for k, v in values.items()}).strip()
