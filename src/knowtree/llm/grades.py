"""Grades read from a model's reply: `{"1": "yes", "2": "no", ...}` and the probabilities behind it.

A small model's grade word hides how sure it was; the log-probabilities at the grade's first token
say it. `soft_grades` turns them into the expected grade under the model's own
distribution (used by the navigation judge, the KB rerank and the KB compliance judge).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, create_model

from knowtree.llm.base import TokenLogprob

Grade = Literal["yes", "partly", "no"]
GRADE_SCORE: dict[str, float] = {"yes": 1.0, "partly": 0.5, "no": 0.0}
_GRADE_AT = re.compile(r'"(\d+)"\s*:\s*"?(?=[A-Za-z])')
_WORD = re.compile(r"[a-z]+")


class JudgeReply(RootModel[dict[str, Grade]]):
    """The judge's reply: candidate number → grade."""


def alternatives_at(
    tokens: Sequence[TokenLogprob], pattern: re.Pattern[str]
) -> Iterator[tuple[re.Match[str], list[tuple[str, float]]]]:
    """For each match of `pattern` in the reply's text (its tokens joined), the alternatives the model
    weighed at the token that covers the match's end (where a grade or a letter starts)."""
    text, starts = "", []
    for t in tokens:
        starts.append(len(text))
        text += t.token
    for match in pattern.finditer(text):
        at = match.end()
        yield match, tokens[max(j for j, start in enumerate(starts) if start <= at)].top


def soft_grades(tokens: Sequence[TokenLogprob]) -> dict[str, float]:
    """Candidate number → expected grade under the model's own distribution at the grade's first token.

    The reply's text is the tokens joined; at each `"n": "grade"` the token covering the grade's
    first letter holds the alternatives the model weighed there. Each alternative whose word is the
    start of a grade (`y`, `yes`, `Yes`, `part`, `no`…) adds its probability to that grade; the
    result is Σ P(g)·score(g) / Σ P(g). A number whose grade token offers no grade word is left out
    (the emitted word counts for it)."""
    out: dict[str, float] = {}
    for match, top in alternatives_at(tokens, _GRADE_AT):
        mass = dict.fromkeys(GRADE_SCORE, 0.0)
        for alternative, logprob in top:
            word = _WORD.search(alternative.lower())
            if word is None:
                continue
            for grade in GRADE_SCORE:
                if grade.startswith(word.group()):
                    mass[grade] += math.exp(logprob)
                    break
        total = sum(mass.values())
        if total > 0:
            out[match.group(1)] = sum(GRADE_SCORE[g] * m for g, m in mass.items()) / total
    return out


def grade_score(word: str) -> float | None:
    """The score of a grade word as written (`Yes`, `no.`, `partly`), None for anything else."""
    found = _WORD.search(word.lower())
    if found is None:
        return None
    return next((s for g, s in GRADE_SCORE.items() if g == found.group()), None)


def yes_no_form(count: int, name: str) -> type[BaseModel]:
    """The reply asked for: "yes" or "no" for each number 1..count (fields c1..cN, aliased "1".."N").
    The enum shapes the schema; validation keeps any string, so the caller reads it leniently."""
    fields: dict[str, Any] = {
        f"c{i}": (str, Field(alias=str(i), json_schema_extra={"enum": ["yes", "no"]}))
        for i in range(1, count + 1)
    }
    return create_model(name, __config__=ConfigDict(extra="forbid"), **fields)
