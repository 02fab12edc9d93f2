"""Structured metadata for nodes: leaves are read by the model, branches are synthesized from children.

Lists that can be merged without judgement (content types, about) are merged in code for branches,
so the model only writes what needs writing: shorter outputs are what make a small local model usable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, field_validator

from knowtree.construct.taxonomy import DEFAULT_TAXONOMY, normalize_types
from knowtree.llm.base import Message
from knowtree.llm.client import LLMClient
from knowtree.prompts import render
from knowtree.types import NodeMeta, Usage

#: the longest summary stored: a backend without constrained decoding can ignore the schema's
#: maxLength (one reply held 200,000 characters); a longer one is cut and the cut marked in its text
MAX_SUMMARY_CHARS = 1500


def cap_summary(text: str, limit: int = MAX_SUMMARY_CHARS) -> str:
    """The summary stripped and, past `limit` characters, cut with a marker saying how long it was."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"{text[:limit].rstrip()} … [summary cut at {limit:,} of {len(text):,} characters]"


_EMPTY = {"", "none", "null", "n/a", "na", "nothing", "-", "no", "not applicable", "none mentioned"}


def _as_list(value: Any) -> Any:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list):
        out = []
        for item in value:
            text = str(item).strip() if item is not None else ""
            if text.lower().strip(".") not in _EMPTY and text not in out:
                out.append(text)
        return out
    return value


class _ListFields(BaseModel):
    critical_actions: list[str] = Field(default_factory=list)
    decisions: list[str] = Field(default_factory=list)
    noteworthy_events: list[str] = Field(default_factory=list)

    @field_validator("critical_actions", "decisions", "noteworthy_events", mode="before")
    @classmethod
    def _lists(cls, v: Any) -> Any:
        return _as_list(v)


class LeafReply(_ListFields):
    summary: str = Field(min_length=1)
    content_types: list[str] = Field(default_factory=list)
    about: list[str] = Field(default_factory=list)

    @field_validator("content_types", "about", mode="before")
    @classmethod
    def _more_lists(cls, v: Any) -> Any:
        return _as_list(v)


class BranchReply(_ListFields):
    summary: str = Field(min_length=1)


def _str_list(max_items: int, max_len: int) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "maxLength": max_len}, "maxItems": max_items}


LEAF_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "maxLength": 600},
        "content_types": _str_list(3, 60),
        "critical_actions": _str_list(3, 140),
        "decisions": _str_list(3, 140),
        "noteworthy_events": _str_list(3, 140),
        "about": _str_list(10, 40),
    },
    "required": ["summary", "content_types", "critical_actions", "decisions", "noteworthy_events", "about"],
}

BRANCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "maxLength": 700},
        "critical_actions": _str_list(4, 140),
        "decisions": _str_list(4, 140),
        "noteworthy_events": _str_list(4, 140),
    },
    "required": ["summary", "critical_actions", "decisions", "noteworthy_events"],
}


def _system() -> Message:
    return Message(role="system", content=render("system"))


def extract_leaf(client: LLMClient, text: str, taxonomy: Sequence[str]) -> tuple[NodeMeta, Usage]:
    if tuple(taxonomy) == DEFAULT_TAXONOMY:
        # free labels, mapped onto the taxonomy in code (see taxonomy.KEYWORDS for why)
        hint = "1-3 short labels (1-3 words each) for what kind of text this is: its genre or format."
    else:
        hint = "1-3 of these types (a new type only if none fits): " + "; ".join(taxonomy)
    prompt = render("leaf_meta", types_hint=hint, text=text)
    result = client.structured(
        [_system(), Message(role="user", content=prompt)],
        LeafReply,
        schema=LEAF_SCHEMA,
        purpose="leaf_meta",
        max_tokens=700,
    )
    reply = result.value
    types, unlisted = normalize_types(reply.content_types, taxonomy)
    meta = NodeMeta(
        summary=cap_summary(reply.summary),
        content_types=types,
        critical_actions=reply.critical_actions,
        decisions=reply.decisions,
        noteworthy_events=reply.noteworthy_events,
        about=reply.about,
        unlisted_types=unlisted,
    )
    return meta, result.usage


def format_meta(meta: NodeMeta, indent: str = "  ") -> str:
    """All six fields, compactly, the way navigation and synthesis prompts show a node."""

    def join(items: Sequence[str]) -> str:
        return "; ".join(items) if items else "none"

    if meta.title:  # a section of a structured document: its title, then only the fields it has
        rows = [f"{indent}Title: {meta.title}"]
        for label, value in (
            ("Summary", meta.summary),
            ("About", ", ".join(meta.about)),
            ("Content types", "; ".join(meta.content_types)),
            ("Decisions", "; ".join(meta.decisions)),
            ("Critical actions", "; ".join(meta.critical_actions)),
            ("Noteworthy events", "; ".join(meta.noteworthy_events)),
        ):
            if value:
                rows.append(f"{indent}{label}: {value}")
        return "\n".join(rows)
    return "\n".join(
        [
            f"{indent}Summary: {meta.summary or 'none'}",
            f"{indent}About: {', '.join(meta.about) if meta.about else 'none'}",
            f"{indent}Content types: {join(meta.content_types)}",
            f"{indent}Decisions: {join(meta.decisions)}",
            f"{indent}Critical actions: {join(meta.critical_actions)}",
            f"{indent}Noteworthy events: {join(meta.noteworthy_events)}",
        ]
    )


def merge_ranked(lists: Sequence[Sequence[str]], limit: int) -> list[str]:
    """Union of lists, most frequent first; ties taken round-robin (each list's first items, then its
    second items...), so a parent's list represents every child, not just the first one."""
    counts: Counter[str] = Counter()
    first: dict[str, tuple[int, int]] = {}
    spelling: dict[str, str] = {}
    for which, items in enumerate(lists):
        for rank, item in enumerate(items):
            key = item.strip().lower()
            if not key:
                continue
            counts[key] += 1
            first.setdefault(key, (rank, which))
            spelling.setdefault(key, item.strip())
    ranked = sorted(counts, key=lambda k: (-counts[k], first[k]))
    return [spelling[k] for k in ranked[:limit]]


def synthesize_branch(client: LLMClient, children: Sequence[NodeMeta]) -> tuple[NodeMeta, Usage]:
    shown = "\n".join(f"Part {i + 1}:\n{format_meta(m)}" for i, m in enumerate(children))
    prompt = render("branch_meta", count=len(children), children=shown)
    result = client.structured(
        [_system(), Message(role="user", content=prompt)],
        BranchReply,
        schema=BRANCH_SCHEMA,
        purpose="branch_meta",
        max_tokens=700,
    )
    reply = result.value
    meta = NodeMeta(
        summary=cap_summary(reply.summary),
        content_types=merge_ranked([c.content_types for c in children], 6),
        critical_actions=reply.critical_actions,
        decisions=reply.decisions,
        noteworthy_events=reply.noteworthy_events,
        about=merge_ranked([c.about for c in children], 16),
        unlisted_types=merge_ranked([c.unlisted_types for c in children], 6),
    )
    return meta, result.usage
