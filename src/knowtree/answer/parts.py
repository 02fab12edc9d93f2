"""A question split into the separate facts it asks for (shared by the walk and `--mode retrieve`).

A simple question stays whole without a model call: one question mark, at most 14 words and no
"and" / "also" / "as well as" / ";", or a multiple-choice question (its options belong with it).
Otherwise one call proposes the parts; a rephrasing of a part already kept is not a new part, and
parts that share no content word with the question are ignored (the question stays whole).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from knowtree.answer.evidence import content_words, is_multiple_choice, jaccard
from knowtree.answer.replies import Parts
from knowtree.errors import ModelOutputError
from knowtree.prompts.reply import ask, narrowed
from knowtree.types import NavStep, Usage

if TYPE_CHECKING:
    from knowtree.llm.client import LLMClient

MAX_PARTS = 3


@dataclass
class Split:
    parts: list[str]
    step: NavStep | None = None  # the decompose step; None when the question stayed whole without a call
    usage: Usage = field(default_factory=Usage)  # a failed call's tokens included


def looks_simple(question: str) -> bool:
    return is_multiple_choice(question) or (
        question.count("?") <= 1
        and len(question.split()) <= 14
        and not re.search(r"\b(and|also|as well as)\b|;", question, re.IGNORECASE)
    )


def split_question(client: LLMClient, question: str, max_parts: int = MAX_PARTS) -> Split:
    """The parts of `question` to look for separately (`[question]` when it is simple, or when the
    reply is unusable: then the step carries the error)."""
    if looks_simple(question):
        return Split([question])
    started = time.monotonic()
    try:
        result = ask(
            client,
            narrowed(Parts, parts={"maxItems": max_parts}),
            "decompose",
            question=question,
            purpose="decompose",
            max_tokens=200,
        )
    except ModelOutputError as exc:
        spent = exc.usage if isinstance(exc.usage, Usage) else Usage()
        return Split([question], NavStep(action="decompose", outcome="kept the question whole", error=str(exc)), spent)
    asked = set(content_words(question))
    parts: list[str] = []
    for p in result.value.parts[:max_parts]:
        words = set(content_words(p))
        # a rephrasing of a part already kept is not a new part
        if p.strip() and not any(jaccard(words, set(content_words(q))) >= 0.5 for q in parts):
            parts.append(p.strip())
    error = None
    if not parts or any(not (set(content_words(p)) & asked) for p in parts):
        error = f"parts unrelated to the question were ignored: {parts}"
        parts = [question]
    # one fact: the question itself, not the model's shorter rewording of it (which dropped "of Amcor
    # as of Q2 of FY2023" from a FinanceBench question, and with it what found the filing's page)
    outcome = f"{len(parts)} part(s): " + " | ".join(parts)
    if len(parts) == 1 and error is None:
        outcome, parts = f"one part ({parts[0]}): the question stays whole", [question]
    step = NavStep(
        action="decompose",
        outcome=outcome,
        error=error,
        tokens=result.usage.input_tokens + result.usage.output_tokens,
        cached=result.cached,
        latency_s=round(time.monotonic() - started, 3),
    )
    return Split(parts, step, result.usage)


def not_found(parts: Sequence[str]) -> str:
    """What a partial answer appends for the parts of the question nothing answered (walk and retrieve)."""
    return " [not found: " + "; ".join(parts) + "]"
