"""Compliance of solutions with the domain rules.

Two kinds of check per rule: deterministic ones where the rule is checkable (a forbidden phrase
present, a required phrase missing; no model), and the model's judgment of every rule against the
solution (one call per solution whose reply lists the violated rule numbers, constrained to the
valid numbers). Violations are stored with the solution; a non-compliant solution is regenerated once
with the violations fed back, and flagged (`status = "flagged"`) if it still fails.
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
    """Generate, check, regenerate once with the violations fed back. Returns (solution, status, report).

    status: ok | flagged (rules still broken) | ungrounded (no verifiable citation).
    `report` keeps every check of every attempt, so a fixed violation stays visible."""
    solution = solutions.generate(client, domain, issue, passages, rules)
    violations = check(client, domain, solution["text"], rules)
    report: list[dict[str, Any]] = [{"attempt": 1, "violations": violations}]
    if violations:
        feedback = "; ".join(f"rule {v['rule']}: {v['detail'] or v['check']}" for v in violations)
        solution = solutions.generate(client, domain, issue, passages, rules, feedback=feedback)
        violations = check(client, domain, solution["text"], rules)
        report.append({"attempt": 2, "violations": violations})
    if violations:
        status = "flagged"
    elif not solution["citations"]:
        status = "ungrounded"
    else:
        status = "ok"
    return solution, status, report
