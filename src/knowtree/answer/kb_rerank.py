"""An optional rerank of Algorithm 2's first issues by the model (off by default).

One call grades the top `RerankOptions.top` accepted issues yes/no against the query (each shown by
its title and a few member texts). Each grade is read as the model's probability of "yes" at the
grade's first token (`llm.grades.soft_grades`, from `Completion.logprobs` where the backend reports them;
else the word it emitted, yes 1 / no 0), and the issues are reordered by that probability plus a
small prior for their semantic order (`prior` / rank), so a flat or missing grade keeps the order.
Issues after the top keep their place; the match each issue was accepted with is unchanged.

Why: on the dev queries the right issue is often in the top 5 but not first (HitRate@1 vs @5,
benchmarks/RESULTS.md AutoKB), and `benchmarks/autokb_vote_bound.py` bounds what reordering the
top 5 could reach. Measured with the embedded 1.5B model it hurts: TV HitRate@1 0.483 → 0.414,
the top issue changed on 40 of 58 queries (benchmarks/RESULTS.md, "AutoKB rerank"), so it stays
off by default and is meant for stronger models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from knowtree.llm.base import Message, Request
from knowtree.llm.client import parse_json_tolerant
from knowtree.llm.grades import GRADE_SCORE, JudgeReply, soft_grades, yes_no_form
from knowtree.prompts import render
from knowtree.prompts.reply import reply_schema, system

if TYPE_CHECKING:
    from pydantic import BaseModel

    from knowtree.answer.kb import Accepted
    from knowtree.llm.client import LLMClient

PURPOSE = "kb_rerank"


@dataclass
class RerankOptions:
    top: int = 5  # accepted issues graded (and reordered)
    members: int = 2  # member texts shown beside an issue's title
    chars: int = 240  # of each text shown
    reply_tokens: int = 8  # per graded issue
    top_logprobs: int = 8  # alternatives per reply token asked for
    prior: float = 0.1  # weight of the semantic order: score = P(yes) + prior / rank


def rerank_form(count: int) -> type[BaseModel]:
    """The reply asked for: "yes" or "no" for each number 1..count (schema only; read leniently)."""
    return yes_no_form(count, "RerankGrades")


def _shown(texts: Sequence[str], options: RerankOptions) -> str:
    parts = list(dict.fromkeys(" ".join(t.split())[: options.chars] for t in texts if t.strip()))
    head, rest = (parts[0], parts[1 : 1 + options.members]) if parts else ("", [])
    return head + "".join(f' | "{t}"' for t in rest)


def rerank(
    client: LLMClient,
    query: str,
    accepted: Sequence[Accepted],
    texts: dict[str, list[str]],
    *,
    domain: str = "general",
    options: RerankOptions | None = None,
    trace: list[dict[str, Any]] | None = None,
) -> list[Accepted]:
    """`accepted` with its first `options.top` reordered by the model's yes/no grades (see the module
    docstring). `texts`: issue id → [title, member texts...]. A malformed reply keeps the order and
    is recorded in the trace."""
    options = options or RerankOptions()
    head, tail = list(accepted[: options.top]), list(accepted[options.top :])
    if len(head) < 2:
        return [*head, *tail]
    lines = [
        f"[{i}] {_shown(texts.get(a.issue.id) or [a.issue.title], options)}" for i, a in enumerate(head, 1)
    ]
    request = Request(
        messages=[
            system(),
            Message(
                role="user",
                content=render(
                    "kb_rerank", query=query, count=len(head), domain=domain, candidates="\n".join(lines)
                ),
            ),
        ],
        schema=reply_schema(rerank_form(len(head))),
        schema_name=PURPOSE,
        max_tokens=options.reply_tokens * len(head) + 16,
        logprobs=options.top_logprobs,
    )
    completion, _, cached = client.complete(request, purpose=PURPOSE)
    step: dict[str, Any] = {"step": "rerank", "candidates": [a.issue.id for a in head], "cached": cached}
    try:
        data = parse_json_tolerant(completion.text)
        reply = JudgeReply.model_validate(data if data is not None else completion.text)
    except (ValidationError, ValueError) as exc:
        step["error"] = f"malformed rerank reply, order kept: {str(exc)[:200]}"
        if trace is not None:
            trace.append(step)
        return [*head, *tail]
    soft = soft_grades(completion.logprobs) if completion.logprobs else {}
    grades: list[float | None] = []
    for i in range(1, len(head) + 1):
        word = reply.root.get(str(i))
        grades.append(soft.get(str(i), GRADE_SCORE[word]) if word is not None else None)
    scores = [(0.5 if g is None else g) + options.prior / rank for rank, g in enumerate(grades, 1)]
    order = sorted(range(len(head)), key=lambda i: -scores[i])  # stable: ties keep the semantic order
    step["grades"] = [None if g is None else round(g, 3) for g in grades]
    step["order"] = [head[i].issue.id for i in order]
    if trace is not None:
        trace.append(step)
    return [*(head[i] for i in order), *tail]
