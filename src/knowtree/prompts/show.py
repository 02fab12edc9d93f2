"""How nodes are shown inside prompts: a node's metadata fields, a message leaf as one line.

Building (branch synthesis, topic calls) and answering (the walk's options, the agent's views) show
nodes to the model the same way; both import these from here.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowtree.text import clip, human_time
from knowtree.types import Node, NodeMeta


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


def message_line(node: Node, limit: int = 300) -> str:
    """How a message leaf is shown to the model: "[12] Caroline (8 May 2023): words"."""
    pos = node.spans[0].line_start if node.spans else 0
    when = human_time(node.meta.time_range[0]).split(",")[0] if node.meta.time_range else "undated"
    speaker, _, words = node.text.partition(": ")
    return f"[{pos}] {speaker} ({when}): {clip(words, limit)}"
