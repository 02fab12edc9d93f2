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


# Words a model may use for each default type. A small model shown the whole list copies its first
# entries whatever the text is (seen with Qwen2.5-1.5B on fiction: "Meeting notes, Task records,
# Bug tracking"), so leaves are asked for free labels, mapped onto the taxonomy here.
KEYWORDS: dict[str, tuple[str, ...]] = {
    "Meeting notes & minutes": ("meeting", "minutes", "agenda", "attendees", "standup", "sync"),
    "Task records & tickets": ("task", "ticket", "issue tracker", "jira", "backlog", "todo", "assignment"),
    "Bug & issue tracking records": ("bug", "defect", "bug report", "error report", "issue"),
    "Design documents": ("design", "mockup", "wireframe", "rfc"),
    "Architecture & technical specifications": (
        "architecture",
        "technical",
        "specification",
        "system design",
    ),
    "Requirements & specifications": ("requirement", "spec", "user story", "acceptance criteria"),
    "Decisions & agreements": ("decision", "agreement", "resolution", "approval"),
    "Project plans & roadmaps": ("plan", "roadmap", "milestone", "timeline", "schedule"),
    "Status reports & updates": ("status", "update", "progress report", "weekly report"),
    "Retrospectives & post-mortems": ("retrospective", "postmortem", "post-mortem", "lessons learned"),
    "Incident reports": ("incident", "outage", "downtime"),
    "How-to guides & procedures": (
        "guide",
        "how-to",
        "tutorial",
        "procedure",
        "instructions",
        "manual",
        "handbook",
        "runbook",
        "playbook",
    ),
    "Reference documentation": ("documentation", "reference", "docs", "glossary"),
    "API documentation": ("api", "endpoint", "sdk"),
    "Policies & guidelines": ("policy", "guideline", "rules", "code of conduct", "compliance"),
    "Legal & contracts": ("legal", "contract", "law", "terms", "agreement", "regulation", "court"),
    "Financial reports & statements": (
        "financial",
        "finance",
        "earnings",
        "balance sheet",
        "income statement",
        "10-k",
        "10-q",
        "annual report",
        "filing",
        "sec",
    ),
    "Budgets & forecasts": ("budget", "forecast", "projection", "cost estimate"),
    "Sales & customer records": ("sales", "customer", "crm", "deal", "invoice", "order"),
    "Support conversations": ("support", "helpdesk", "customer service", "support ticket"),
    "FAQs": ("faq", "frequently asked", "q&a"),
    "Product descriptions & release notes": ("product", "release notes", "changelog", "feature list"),
    "Marketing & pitch material": ("marketing", "pitch", "advertisement", "brochure", "press release"),
    "Research papers & studies": (
        "research",
        "paper",
        "study",
        "scientific",
        "academic",
        "experiment",
        "thesis",
    ),
    "Data & analysis": ("data", "analysis", "statistics", "report", "survey", "metrics"),
    "Emails & correspondence": ("email", "letter", "correspondence", "memo"),
    "Chat conversations": ("chat", "conversation", "messages", "slack", "transcript"),
    "Interviews & dialogue": ("interview", "dialogue", "discussion", "debate", "q and a"),
    "News & announcements": ("news", "announcement", "article", "press", "journalism", "report"),
    "Narrative & fiction": (
        "story",
        "fiction",
        "novel",
        "narrative",
        "tale",
        "science fiction",
        "short story",
        "fantasy",
        "literature",
        "drama",
        "scene",
    ),
    "Biography & history": ("biography", "history", "historical", "memoir", "profile"),
    "Opinion & commentary": (
        "opinion",
        "commentary",
        "editorial",
        "essay",
        "column",
        "review",
        "criticism",
        "politics",
        "political analysis",
    ),
    "Educational material": ("educational", "lesson", "course", "textbook", "lecture", "explanation"),
    "Team & organisation information": (
        "team",
        "organisation",
        "organization",
        "contacts",
        "roles",
        "org chart",
    ),
    "Code & configuration": ("code", "source code", "configuration", "config", "script", "program"),
    "Other": (),
}


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
        match = by_key.get(k) or halves.get(k) or _closest(k, taxonomy)
        value = match or raw
        if value not in out:
            out.append(value)
        if match is None and raw not in unlisted:
            unlisted.append(raw)
    return out, unlisted


def _stems(text: str) -> set[str]:
    return {w[:5] for w in _key(text).split() if len(w) > 2 and w not in {"and", "the", "notes", "records"}}


def _closest(key: str, taxonomy: Sequence[str]) -> str | None:
    """The taxonomy entry sharing most words with a free label (its name and known keywords)."""
    words = _stems(key)
    best, score = None, 0
    for entry in taxonomy:
        vocab = _stems(entry)
        for keyword in KEYWORDS.get(entry, ()):
            vocab |= _stems(keyword)
        overlap = len(words & vocab)
        if overlap > score:
            best, score = entry, overlap
    return best
