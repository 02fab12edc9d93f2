"""`--mode nav`: score-guided navigation, the model judging only what the tree's scores put first.

LATTICE-style, sized for a 1.5B model on two CPU cores (a call costs 5–20 s, reading the prompt
dominates), so the model never picks freely and never sees more than a short list:

1. The LLM-free tree scores (`retrieve.treesearch.rank_tree`: contextual BM25 + dense, rolled up
   the tree) rank every piece. Pieces are grouped by the leaf they were cut from (a turn, a page,
   a passage): the **units** the model judges.
2. Round 1: the top `candidates` units by prior (with a budget: the best ones the budget leaves
   out, `first="edge"`) go to the model in ONE call, each as its context line and best piece; the
   reply is a grade per unit (`yes` / `partly` / `no`), constrained by a JSON schema with enum values.
3. Round 2, when `rounds` > 1 (the default is one round: measured on the dev sets, a second call
   bought one FinanceBench question in 40 and nothing on LoCoMo): the beam moves down and across the tree; the next
   units, pre-ranked by their prior plus the grades of already-judged units in the same branch (a grade propagates to the nodes
   above it and back down to their other leaves, damped per level), are judged in one more call.
4. Every piece's final score is `prior + weight · (grade − mean grade of its call)` (prior = the
   tree score over the best one, grade ∈ {1, 0.5, 0}); an unjudged piece keeps its prior. Only the
   judge's discrimination counts: a "yes" among "no"s lifts a piece, and a judge that answers the
   same for every candidate leaves the tree's ranking as it was (measured: a judge rejecting
   everything with an absolute mix cut LoCoMo hit@1024 from 0.85 to 0.31; `bench_nav_oracle.py`).
5. The ranking is packed into the same token budget as `--mode retrieve` (`pack_evidence`) and one
   answer call reads it, quote-verified (the answer step of tree search).

A malformed judge reply is not repaired (one call per round): it is recorded in the trace
(`NavStep.error`) and that round's units keep their prior. Calls per question: `rounds` + 1.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from knowtree.errors import UserError
from knowtree.llm.base import Message, Request
from knowtree.llm.client import parse_json_tolerant
from knowtree.llm.grades import GRADE_SCORE, Grade, JudgeReply, soft_grades
from knowtree.prompts import render
from knowtree.prompts.reply import reply_schema, system
from knowtree.retrieve.treesearch import Ranking
from knowtree.types import Answer, NavStep, Node, Usage

if TYPE_CHECKING:
    from knowtree.llm.client import LLMClient
    from knowtree.retrieve.treeindex import IndexRow, TreeIndex
    from knowtree.retrieve.treescore import TreeShape
    from knowtree.retrieve.treesearch import Found, Rerank

PURPOSE = "nav_judge"


@dataclass(frozen=True, slots=True)
class NavOptions:
    """How much the model judges and how much its grades count."""

    #: one call judging the 8 best units at the budget's edge: the same LoCoMo gain as two rounds of
    #: 6 in ~6 s less, none on FinanceBench (two rounds: +1 of 40) (benchmarks/RESULTS.md, "One judge call")
    candidates: int = 8  # units per judge call
    rounds: int = 1  # judge calls per question (each one level of the beam)
    weight: float = 0.5  # how far a centred grade moves a judged piece (priors lie in [0, 1])
    neighbour: float = 0.5  # how much a judged unit's grade lifts unjudged units of its branch (round 2)
    decay: float = 0.5  # per level up the tree, for that lift
    snippet_chars: int = 240  # of a unit's best piece shown to the judge
    context_chars: int = 120  # of the piece's context line (title, breadcrumb, date, speaker)
    reply_tokens: int = 16  # per candidate, for the judge's reply
    #: read each grade as the model's probability mass on yes / partly / no at the grade's first
    #: token (where the backend reports log-probabilities), not as the word it happened to emit
    soft: bool = True
    top_logprobs: int = 8  # alternatives per reply token asked for, when `soft`
    #: what the first round judges when the budget is known: "edge", the best units the budget
    #: leaves out (a grade there can pull evidence in; inside, it can only push some out), or
    #: "top", the best units overall. Without a budget both are "top".
    first: Literal["top", "edge"] = "edge"


def parse_options(text: str) -> NavOptions:
    """`NavOptions` from "rounds=1,candidates=8" (comma- or space-separated NAME=VALUE).

    Values are coerced by pydantic from the field types (as `config.Settings` coerces environment
    values). Raises `UserError` naming the bad part: an unknown name, a value of the wrong type, or a
    count below 1."""
    from typing import get_type_hints

    from pydantic import TypeAdapter

    hints = get_type_hints(NavOptions)
    changes: dict[str, Any] = {}
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        name, sep, raw = part.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in hints:
            raise UserError(f"nav option {part!r}: expected NAME=VALUE with NAME one of {', '.join(hints)}")
        try:
            value = TypeAdapter(hints[name]).validate_python(raw)
        except ValidationError:
            if name == "first":
                raise UserError(f"nav option first: {raw!r} must be top or edge") from None
            raise UserError(f"nav option {name}: {raw!r} is not a {hints[name].__name__}") from None
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise UserError(f"nav option {name}: must be at least 1, got {value}")
        changes[name] = value
    return replace(NavOptions(), **changes)


@dataclass(slots=True)
class Unit:
    """A leaf of the tree as the judge sees it: its pieces (best first) and its prior."""

    node: str
    pieces: list[str]
    prior: float


@dataclass(slots=True)
class NavResult:
    ranking: Ranking  # pieces in the final order, with the combined scores
    steps: list[NavStep] = field(default_factory=list)
    grades: dict[str, float] = field(default_factory=dict)  # unit (leaf node id) → grade score
    calls: int = 0
    fallbacks: int = 0  # rounds whose reply was malformed (their units kept the prior)
    usage: Usage = field(default_factory=Usage)
    shown_chars: int = 0  # characters of corpus text shown to the judge


def units_of(ranking: Ranking, rows: dict[str, IndexRow]) -> list[Unit]:
    """Pieces grouped by the leaf they come from, in order of each leaf's best piece."""
    best = max((ranking.scores.get(p, 0.0) for p in ranking.pieces), default=0.0) or 1.0
    out: dict[str, Unit] = {}
    for p in ranking.pieces:
        node = rows[p].node if p in rows else p
        unit = out.get(node)
        if unit is None:
            out[node] = Unit(node, [p], max(0.0, ranking.scores.get(p, 0.0)) / best)
        else:
            unit.pieces.append(p)
    return list(out.values())


@lru_cache(maxsize=64)
def judge_form(count: int) -> type[BaseModel]:
    """The reply the judge is asked for with `count` candidates: a grade for each number 1..count,
    all required, nothing else. Only its schema is sent; the reply is read by `JudgeReply`, which
    keeps the grades given when some are missing (those units keep their prior)."""
    fields: dict[str, Any] = {f"c{i}": (Grade, Field(alias=str(i))) for i in range(1, count + 1)}
    return create_model("JudgeGrades", __config__=ConfigDict(extra="forbid"), **fields)


def judge_schema(count: int) -> dict[str, object]:
    return reply_schema(judge_form(count))


def _snippet(row: IndexRow | None, options: NavOptions) -> tuple[str, int]:
    if row is None:
        return "", 0
    context = " ".join(row.context.split())[: options.context_chars]
    text = " ".join(row.text.split())[: options.snippet_chars]
    return (f"({context}) {text}" if context else text), len(text)


def judge(
    client: LLMClient,
    question: str,
    units: Sequence[Unit],
    rows: dict[str, IndexRow],
    options: NavOptions,
) -> tuple[dict[str, float], NavStep, Usage, int]:
    """One call grading `units`: (unit → grade score, the trace step, usage, chars shown).

    A reply that does not parse or misses a candidate is recorded in the step's `error`; the
    units it did not grade are absent from the result (they keep their prior)."""
    lines, shown = [], 0
    for i, u in enumerate(units, 1):
        text, n = _snippet(rows.get(u.pieces[0]), options)
        lines.append(f"[{i}] {text}")
        shown += n
    messages = [
        system(),
        Message(
            role="user",
            content=render("nav_judge", question=question, count=len(units), candidates="\n".join(lines)),
        ),
    ]
    request = Request(
        messages=messages,
        schema=judge_schema(len(units)),
        schema_name=PURPOSE,
        max_tokens=options.reply_tokens * len(units) + 16,
        logprobs=options.top_logprobs if options.soft else 0,
    )
    started = time.monotonic()
    completion, usage, cached = client.complete(request, purpose=PURPOSE)
    step = NavStep(
        action="choose",
        options=[u.node for u in units],
        tokens=usage.input_tokens + usage.output_tokens,
        latency_s=round(time.monotonic() - started, 3),
        cached=cached,
    )
    grades: dict[str, float] = {}
    try:
        data = parse_json_tolerant(completion.text)
        reply = JudgeReply.model_validate(data if data is not None else completion.text)
    except (ValidationError, ValueError) as exc:
        step.error = f"malformed judge reply, prior kept for {len(units)} unit(s): {str(exc)[:200]}"
        step.outcome = completion.text[:200]
        return grades, step, usage, shown
    soft = soft_grades(completion.logprobs) if options.soft and completion.logprobs else {}
    missing = []
    for i, u in enumerate(units, 1):
        g = reply.root.get(str(i))
        if g is None:
            missing.append(str(i))
        else:
            grades[u.node] = soft.get(str(i), GRADE_SCORE[g])
    if missing:
        step.error = f"judge reply graded no candidate {', '.join(missing)}: prior kept for those"
    step.reason = " ".join(
        f"[{i}] {reply.root.get(str(i), '?')}" + (f" p={soft[str(i)]:.2f}" if str(i) in soft else "")
        for i in range(1, len(units) + 1)
    )
    return grades, step, usage, shown


def unit_ancestors(unit: Unit, shape: TreeShape) -> list[str]:
    """The tree nodes above a unit, nearest first (a leaf cut in pieces is the pieces' parent in the
    index; a leaf kept whole is its one piece, whose parent is the leaf's parent)."""
    return [a for a in shape.ancestors(unit.pieces[0]) if a != unit.node]


def lift(
    units: Sequence[Unit],
    judged: Sequence[Unit],
    grades: dict[str, float],
    shape: TreeShape,
    options: NavOptions,
) -> dict[str, float]:
    """Round-2 pre-ranking: prior plus the grades of judged units in the same branches (path relevance:
    a node's relevance is the best grade below it, passed down to its other leaves, damped per level)."""
    above: dict[str, float] = {}
    for u in judged:
        g = grades.get(u.node)
        if g is None:
            continue
        for a in unit_ancestors(u, shape):
            above[a] = max(above.get(a, 0.0), g)
    out: dict[str, float] = {}
    for u in units:
        bonus, w = 0.0, options.neighbour
        for a in unit_ancestors(u, shape):
            bonus = max(bonus, w * above.get(a, 0.0))
            w *= options.decay
        out[u.node] = u.prior + bonus
    return out


def centred(grades: dict[str, float]) -> dict[str, float]:
    """A batch's grades minus their mean: only the judge's discrimination among the candidates it
    saw counts, so a judge that says "no" (or "yes") to everything leaves the prior as it was."""
    if not grades:
        return {}
    mean = sum(grades.values()) / len(grades)
    return {k: g - mean for k, g in grades.items()}


def monotone_prior(ranking: Ranking) -> dict[str, float]:
    """Each piece's score over the best one, capped by the score of the piece ranked before it: the
    ranking's order exactly (it may demote repeated pieces of one leaf below their raw score), on the
    scale of the scores."""
    best = max((ranking.scores.get(p, 0.0) for p in ranking.pieces), default=0.0) or 1.0
    out: dict[str, float] = {}
    cap = 1.0
    for p in ranking.pieces:
        cap = min(cap, max(0.0, ranking.scores.get(p, 0.0)) / best)
        out[p] = cap
    return out


def combine(ranking: Ranking, units: Sequence[Unit], shifts: dict[str, float], weight: float) -> Ranking:
    """The final ranking: prior (`monotone_prior`) + weight · centred grade for judged units; the
    others keep their prior (so with no grade the order is the ranking's, exactly)."""
    prior = monotone_prior(ranking)
    scores: dict[str, float] = {}
    for u in units:
        shift = weight * shifts.get(u.node, 0.0)
        for p in u.pieces:
            scores[p] = prior.get(p, 0.0) + shift
    position = {p: i for i, p in enumerate(ranking.pieces)}
    pieces = sorted(ranking.pieces, key=lambda p: (-scores.get(p, 0.0), position[p]))
    return Ranking(pieces, scores, ranking.prior, ranking.own)


def within_budget(ranking: Ranking, rows: dict[str, IndexRow], budget_tokens: int) -> set[str]:
    """The units (leaf nodes) whose pieces `pack` would take first into `budget_tokens`."""
    used, out = 0, set()
    for p in ranking.pieces:
        row = rows.get(p)
        n = max(1, (len(row.text) + 3) // 4) if row is not None else 1
        if used + n > budget_tokens:
            continue
        used += n
        out.add(row.node if row is not None else p)
        if used >= budget_tokens:
            break
    return out


def navigate(
    index: TreeIndex,
    ranking: Ranking,
    question: str,
    client: LLMClient,
    shape: TreeShape,
    options: NavOptions | None = None,
    on_step: Callable[[NavStep], None] | None = None,
    budget_tokens: int | None = None,
) -> NavResult:
    """Judge the best units in `options.rounds` calls and return the combined ranking with the trace.

    With `budget_tokens`, rounds after the first (and the first too, with `options.first == "edge"`)
    judge only units that the ranking so far leaves out of the budget: the beam spends its calls
    where a grade can change what is read."""
    options = options or NavOptions()
    rows = {r.id: r for r in index.rows}
    units = units_of(ranking, rows)
    result = NavResult(ranking=ranking)
    grades: dict[str, float] = {}
    shifts: dict[str, float] = {}
    judged: set[str] = set()
    for level in range(1, options.rounds + 1):
        left = [u for u in units if u.node not in judged]
        if budget_tokens is not None and (level > 1 or options.first == "edge"):
            inside = within_budget(combine(ranking, units, shifts, options.weight), rows, budget_tokens)
            left = [u for u in left if u.node not in inside]
        if not left:
            break
        if level > 1:
            pre = lift(left, [u for u in units if u.node in judged], grades, shape, options)
            position = {u.node: i for i, u in enumerate(left)}
            left = sorted(left, key=lambda u: (-pre[u.node], position[u.node]))
        batch = left[: options.candidates]
        got, step, usage, shown = judge(client, question, batch, rows, options)
        step.outcome = step.outcome or (
            f"nav round {level}: graded {len(got)}/{len(batch)} "
            f"(mean grade {sum(got.values()) / max(1, len(got)):.2f}, above 0.5: {sum(1 for g in got.values() if g > 0.5)})"
        )
        step.breadcrumb = [f"round {level}"]
        judged.update(u.node for u in batch)
        grades.update(got)
        shifts.update(centred(got))
        result.calls += 1
        result.fallbacks += int(step.error is not None and not got)
        result.usage.add(usage)
        result.shown_chars += shown
        result.steps.append(step)
        if on_step:
            on_step(step)
    result.grades = grades
    result.ranking = combine(ranking, units, shifts, options.weight)
    if result.calls:
        outcome = (
            f"nav: {len(grades)} unit(s) graded in {result.calls} call(s); final = prior + "
            f"{options.weight:.2f}·(grade − the mean grade of its call) for judged units, prior elsewhere"
        )
    elif units:  # every unit is read anyway: a grade could not change what is read
        outcome = f"nav: no judge needed, all {len(units)} unit(s) fit the budget; the ranking is the prior's"
    else:
        outcome = "nav: nothing to judge (no unit found); the ranking is the prior's"
    summary = NavStep(
        action="combine",
        options=result.ranking.pieces[: options.candidates],
        outcome=outcome,
        reason="; ".join(
            f"{p[:12]} prior {ranking.scores.get(p, 0.0):.3f} → {result.ranking.scores.get(p, 0.0):.3f}"
            for p in result.ranking.pieces[:5]
        ),
        # an error only when the judge was called and none of its grades could be used
        error=None if grades or not result.calls else "no grade usable: the ranking is the prior's",
    )
    result.steps.append(summary)
    if on_step:
        on_step(summary)
    return result


def judged_beam(
    client: LLMClient,
    question: str,
    options: NavOptions | None = None,
    on_step: Callable[[NavStep], None] | None = None,
    budget_tokens: int | None = None,
) -> Rerank:
    """`navigate` as `retrieve.treesearch.search_index`'s re-ranking step: the found evidence's
    `reranked` is then the `NavResult` (its steps, grades and usage)."""
    return lambda index, ranking, shape: navigate(
        index, ranking, question.strip(), client, shape, options, on_step, budget_tokens
    )


def ask_nav(
    found: Found,
    tree_nodes: dict[str, Node],
    root_id: str | None,
    question: str,
    client: LLMClient,
    *,
    budget: int,
    on_step: Callable[[NavStep], None] | None = None,
) -> Answer:
    """The answer step after `search_index(..., rerank=judged_beam(...))`: the judged beam's packed
    evidence read by one quote-verified answer call; the beam's steps lead the trace."""
    from knowtree.answer.indexed import answer_over_evidence

    assert isinstance(found.reranked, NavResult), "ask_nav reads what judged_beam re-ranked"
    evidence = found.evidence
    read = NavStep(
        action="read",
        node_id=root_id,
        options=[ev.node_id for ev in evidence],
        outcome=f"nav: {len(evidence)} evidence item(s), {sum(ev.tokens for ev in evidence)} tokens",
    )
    if on_step:
        on_step(read)
    answer = answer_over_evidence(tree_nodes, evidence, question, client, budget, on_step)
    answer.trace = [*found.reranked.steps, read, *answer.trace]
    answer.usage = client.usage.model_copy()
    return answer
