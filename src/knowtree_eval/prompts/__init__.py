"""The evaluation harness's prompt templates: the reader's answer (`eval_answer.txt`), the judge
(`judge.txt`) and RAPTOR's cluster summaries (`raptor_summary.txt`).

They live with the harness because knowtree itself never uses them. Rendering is knowtree's own
(`knowtree.prompts.render`, `$name` placeholders), pointed at this package; the system prompt is
knowtree's, so every method is asked in the same voice.
"""

from __future__ import annotations

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
