"""One-sentence document descriptions and catalogue metadata (company, year, type), made at build
time with one short call per document, for choosing documents in a collection."""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import field_validator

from knowtree.errors import ModelOutputError
from knowtree.ingest.structure import StructuredDocument
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import Reply, ask, reply_schema, string
from knowtree.types import Usage

OPENING_CHARS = 1500
MAX_TITLES = 25


class DocReply(Reply):
    description: str = string(300, ...)
    company: str = string(80)
    year: str = string(8)
    doc_type: str = string(40)

    @field_validator("year", mode="before")
    @classmethod
    def _year(cls, v: Any) -> Any:
        m = re.search(r"\b(19|20)\d\d\b", str(v or ""))
        return m.group(0) if m else ""


SCHEMA: dict[str, Any] = reply_schema(DocReply)  # derived: the schema a describe call sends


def describe_document(
    client: LLMClient, sd: StructuredDocument, titles: list[str]
) -> tuple[str, dict[str, str], Usage, str | None]:
    """(description, metadata, usage, error). A reply that stays invalid leaves an empty description
    and the error, never an invented one."""
    text = " ".join(sd.document.text[: OPENING_CHARS * 2].split())[:OPENING_CHARS]
    outline = "; ".join(titles[:MAX_TITLES]) or "none"
    try:
        result = ask(
            client,
            DocReply,
            "doc_describe",
            file_name=os.path.basename(sd.path),
            outline=outline,
            text=text,
            purpose="describe",
            max_tokens=200,
        )
    except ModelOutputError as exc:
        return "", {}, exc.usage if isinstance(exc.usage, Usage) else Usage(), str(exc)
    r = result.value
    meta = {
        k: v.strip()
        for k, v in (("company", r.company), ("year", r.year), ("doc_type", r.doc_type))
        if v.strip()
    }
    return " ".join(r.description.split()), meta, result.usage, None
