"""Compliance of solutions with the domain rules.

Two kinds of check per rule: deterministic ones where the rule is checkable (a forbidden phrase
present, a required phrase missing; no model), and the model's judgment of every rule against the
solution (one call per solution whose reply lists the violated rule numbers, constrained to the
valid numbers). Violations are stored with the solution; a non-compliant solution is regenerated once
with the violations fed back, and flagged (`status = "flagged"`) if it still fails.

A solution none of whose citations could be verified (each quote must be in its passage) gets the
same one regeneration, with the rejected quotes fed back: with the embedded 1.5B model half of the
first TV solutions quoted nothing verbatim (benchmarks/RESULTS.md, "AutoKB solutions").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from knowtree.construct.kb import solutions
from knowtree.ingest.kb_inputs import Rule
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import ask
from knowtree.records import KBChunk, KBIssue


def phrase_in(phrase: str, text: str) -> bool:
    pattern = r"(?<!\w)" + r"\s+".join(re.escape(w) for w in phrase.split()) + r"(?!\w)"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None


def deterministic_violations(text: str, rules: Sequence[Rule]) -> list[dict[str, Any]]:
    out = []
    for r in rules:
        for phrase in r.forbidden:
            if phrase_in(phrase, text):
                out.append({"rule": r.id, "check": "forbidden", "detail": f"contains {phrase!r}"})
        for phrase in r.required:
            if not phrase_in(phrase, text):
                out.append({"rule": r.id, "check": "required", "detail": f"lacks {phrase!r}"})
    return out


def judgment_model(rules: int) -> type[BaseModel]:
    number: Any = Literal[tuple(range(1, rules + 1))]  # type: ignore[misc]
    return create_model(
        f"ComplianceJudgment{rules}",
        __config__=ConfigDict(extra="ignore"),
        violated=(list[number], Field(default_factory=list)),  # type: ignore[valid-type]
        reason=(str, Field(default="", max_length=200)),
    )


def judge(client: LLMClient, domain: str, text: str, rules: Sequence[Rule]) -> list[dict[str, Any]]:
    if not rules:
        return []
    model = judgment_model(len(rules))
    reply = ask(
        client,
        model,
        "kb_compliance",
        domain=domain or "general",
        rules=solutions.rules_text(rules),
        solution=text,
        purpose="kb_compliance",
        max_tokens=120,
    ).value
    return [
        {"rule": rules[int(n) - 1].id, "check": "model", "detail": reply.reason}
        for n in dict.fromkeys(reply.violated)
    ]


def check(client: LLMClient, domain: str, text: str, rules: Sequence[Rule]) -> list[dict[str, Any]]:
    """Every violation found (deterministic first, then the model's)."""
    found = deterministic_violations(text, rules)
    found += judge(client, domain, text, rules)
    return found


def solve(
    client: LLMClient,
    domain: str,
    issue: KBIssue,
    passages: Sequence[KBChunk],
    rules: Sequence[Rule],
) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    """Generate, check, and regenerate once with what was wrong fed back (broken rules, or no
    verifiable citation while passages were shown). Returns (solution, status, report).

    Of two attempts the better one is kept: compliant before non-compliant, then cited before
    uncited, then the second. status: ok | flagged (rules still broken) | ungrounded (no verifiable
    citation). `report` keeps every check of every attempt (and the attempt kept), so a fixed
    violation stays visible."""
    solution = solutions.generate(client, domain, issue, passages, rules)
    violations = check(client, domain, solution["text"], rules)
    report: list[dict[str, Any]] = [
        {"attempt": 1, "violations": violations, "citations": len(solution["citations"])}
    ]
    kept = 1
    problems = retry_feedback(solution, violations, passages)
    if problems:
        second = solutions.generate(client, domain, issue, passages, rules, feedback=problems)
        second_violations = check(client, domain, second["text"], rules)
        report.append({"attempt": 2, "violations": second_violations, "citations": len(second["citations"])})
        if _quality(second, second_violations) >= _quality(solution, violations):
            solution, violations, kept = second, second_violations, 2
    for entry in report:  # which attempt's solution is stored
        entry["kept"] = entry["attempt"] == kept
    if violations:
        status = "flagged"
    elif not solution["citations"]:
        status = "ungrounded"
    else:
        status = "ok"
    return solution, status, report


def _quality(solution: dict[str, Any], violations: list[dict[str, Any]]) -> tuple[bool, bool]:
    return (not violations, bool(solution["citations"]))


def retry_feedback(
    solution: dict[str, Any], violations: list[dict[str, Any]], passages: Sequence[KBChunk]
) -> str:
    """What a regeneration is told about the first attempt ("" when nothing calls for one)."""
    parts = []
    if violations:
        broken = "; ".join(f"rule {v['rule']}: {v['detail'] or v['check']}" for v in violations)
        parts.append(f"A previous version broke these rules; fix that: {broken}")
    if passages and not solution["citations"]:
        rejected = "; ".join(f'"{u["quote"][:80]}" ({u["why"]})' for u in solution.get("unverified", [])[:3])
        parts.append(
            "A previous version cited nothing that could be checked. Cite at least one passage with a "
            "quote of 4 or more words copied exactly, character for character, from that passage"
            + (f". Rejected quotes: {rejected}" if rejected else "")
        )
    return "\n".join(parts)
