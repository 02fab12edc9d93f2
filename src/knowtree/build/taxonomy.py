"""The content-type taxonomy leaves are tagged with. Configurable; an unlisted type is kept and flagged."""

from __future__ import annotations

import re
from collections.abc import Sequence

DEFAULT_TAXONOMY: tuple[str, ...] = (
    "Meeting notes & minutes",
    "Task records & tickets",
    "Bug & issue tracking records",
    "Design documents",
    "Architecture & technical specifications",
    "Requirements & specifications",
    "Decisions & agreements",
    "Project plans & roadmaps",
    "Status reports & updates",
    "Retrospectives & post-mortems",
    "Incident reports",
    "How-to guides & procedures",
    "Reference documentation",
    "API documentation",
    "Policies & guidelines",
    "Legal & contracts",
    "Financial reports & statements",
    "Budgets & forecasts",
    "Sales & customer records",
    "Support conversations",
    "FAQs",
    "Product descriptions & release notes",
    "Marketing & pitch material",
    "Research papers & studies",
    "Data & analysis",
    "Emails & correspondence",
    "Chat conversations",
    "Interviews & dialogue",
    "News & announcements",
    "Narrative & fiction",
    "Biography & history",
    "Opinion & commentary",
    "Educational material",
    "Team & organisation information",
    "Code & configuration",
    "Other",
)


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def normalize_types(types: Sequence[str], taxonomy: Sequence[str]) -> tuple[list[str], list[str]]:
    """Map the model's types onto the taxonomy's spelling; return (types, unlisted ones).

    Matching ignores case and punctuation and accepts a type that names one side of a
    "X & Y" entry ("Meeting notes" → "Meeting notes & minutes").
    """
    by_key = {_key(t): t for t in taxonomy}
    halves: dict[str, str] = {}
    for t in taxonomy:
        for half in re.split(r"\s*&\s*|\s+and\s+", t):
            halves.setdefault(_key(half), t)
    out: list[str] = []
    unlisted: list[str] = []
    for raw in types:
        raw = raw.strip()
        if not raw:
            continue
        k = _key(raw)
        match = by_key.get(k) or halves.get(k)
        value = match or raw
        if value not in out:
            out.append(value)
        if match is None and raw not in unlisted:
            unlisted.append(raw)
    return out, unlisted
