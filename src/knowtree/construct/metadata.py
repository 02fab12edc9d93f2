"""Structured metadata for nodes: leaves are read by the model, branches are synthesized from children.

Lists that can be merged without judgement (content types, about) are merged in code for branches,
so the model only writes what needs writing: shorter outputs are what make a small local model usable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from knowtree.construct.taxonomy import DEFAULT_TAXONOMY, normalize_types
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import Reply, ask, listed, reply_schema, string, strings
from knowtree.prompts.show import format_meta
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


class LeafReply(Reply):
    summary: str = string(600, ..., min_length=1)
    content_types: list[str] = strings(3, 60)
    critical_actions: list[str] = strings(3, 140)
    decisions: list[str] = strings(3, 140)
    noteworthy_events: list[str] = strings(3, 140)
    about: list[str] = strings(10, 40)

    _lists = listed("content_types", "critical_actions", "decisions", "noteworthy_events", "about")


class BranchReply(Reply):
    summary: str = string(700, ..., min_length=1)
    critical_actions: list[str] = strings(4, 140)
    decisions: list[str] = strings(4, 140)
    noteworthy_events: list[str] = strings(4, 140)

    _lists = listed("critical_actions", "decisions", "noteworthy_events")


LEAF_SCHEMA: dict[str, Any] = reply_schema(LeafReply)  # derived: the schema a leaf call sends
BRANCH_SCHEMA: dict[str, Any] = reply_schema(BranchReply)


def extract_leaf(client: LLMClient, text: str, taxonomy: Sequence[str]) -> tuple[NodeMeta, Usage]:
    if tuple(taxonomy) == DEFAULT_TAXONOMY:
        # free labels, mapped onto the taxonomy in code (see taxonomy.KEYWORDS for why)
        hint = "1-3 short labels (1-3 words each) for what kind of text this is: its genre or format."
    else:
        hint = "1-3 of these types (a new type only if none fits): " + "; ".join(taxonomy)
    result = ask(
        client, LeafReply, "leaf_meta", types_hint=hint, text=text, purpose="leaf_meta", max_tokens=700
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
    result = ask(
        client,
        BranchReply,
        "branch_meta",
        count=len(children),
        children=shown,
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
