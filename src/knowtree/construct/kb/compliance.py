"""Compliance of solutions with the domain rules.

Two kinds of check per rule: deterministic ones where the rule is checkable (a forbidden phrase
present, a required phrase missing; no model), and the model's judgment of every rule against the
solution and the passages it cites. The judge is asked one yes/no question per rule ("yes": broken;
the rule's own `question` where the rules file gives one, a concrete question a small model answers
better than it applies a rule), each answer read as the model's probability of "yes" at the answer's
first token (`llm.grades.soft_grades`, where the backend reports log-probabilities; else the word it
wrote); a rule is broken when that probability is at least its `threshold` (a rules file may give one
per rule; else `VIOLATION_AT`). Why not one call listing
the broken rules' numbers, as before: the embedded 1.5B model answered "[1, 2, 3, 4]" for half the
solutions it flagged, whatever they said (benchmarks/RESULTS.md, "Solutions three ways"), and
`benchmarks/bench_kb_judge.py` measures the judges on solutions with known, injected violations.

A rule may declare `append`: a statement the domain owner mandates (a disclaimer such as "See a
doctor for a diagnosis"). When its required phrase is missing, the statement is appended to the
solution instead of asking the model again, the rule's violations are resolved and recorded under
`fixed` in the report (`solution["appended"]` lists the rules), so nothing is hidden.

Violations are stored with the solution; a non-compliant solution is regenerated once with the
violations fed back, and flagged (`status = "flagged"`) if it still fails. A solution none of whose
citations could be verified (each quote must be in its passage) gets the same one regeneration, with
the rejected quotes fed back: with the embedded 1.5B model half of the first TV solutions quoted
nothing verbatim (benchmarks/RESULTS.md, "AutoKB solutions").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from knowtree.construct.kb import solutions
from knowtree.ingest.kb_inputs import Rule
from knowtree.llm.client import LLMClient
from knowtree.llm.grades import grade_score, soft_grades, yes_no_form
from knowtree.prompts.reply import ask
from knowtree.records import KBChunk, KBIssue
from knowtree.text import phrase_in


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


# P("yes, broken") from which a rule counts as broken (chosen on injected violations: RESULTS.md)
VIOLATION_AT = 0.42
JUDGE_LOGPROBS = 8  # alternatives per reply token asked for
PASSAGE_SHOWN = 400  # characters of each cited passage the judge reads
PASSAGES_SHOWN = 3


def question(rule: Rule) -> str:
    """What the judge is asked about one rule: the rule's own question, else whether it is broken."""
    return rule.question or f'Does the solution break this rule? Rule: "{rule.text}"'


def grades(
    client: LLMClient, domain: str, text: str, rules: Sequence[Rule], passages: Sequence[str] = ()
) -> list[float]:
    """The judge's probability that the solution breaks each rule, in the rules' order: one short
    call per rule, the solution (and the `passages` it cites) first and the rule's question last, so
    a backend that keeps the prompt's prefix (llama.cpp does) reads the solution once. Raises
    `ModelOutputError` when a reply stays malformed after the client's repairs."""
    form = yes_no_form(1, "ComplianceAnswer")

    def is_a_grade(reply: BaseModel) -> None:
        if grade_score(reply.c1) is None:  # type: ignore[attr-defined]
            raise ValueError('answer "yes" or "no"')

    shown = "\n".join(
        f"[{i}] {' '.join(p.split())[:PASSAGE_SHOWN]}" for i, p in enumerate(passages[:PASSAGES_SHOWN], 1)
    )
    out = []
    for rule in rules:
        result = ask(
            client,
            form,
            "kb_compliance",
            domain=domain or "general",
            passages=shown or "(none cited)",
            solution=text,
            question=question(rule),
            purpose="kb_compliance",
            max_tokens=16,
            check=is_a_grade,
            logprobs=JUDGE_LOGPROBS,
        )
        soft = soft_grades(result.logprobs) if result.logprobs else {}
        written = grade_score(result.value.c1)  # type: ignore[attr-defined]
        out.append(soft.get("1", written if written is not None else 0.0))
    return out


def judge(
    client: LLMClient, domain: str, text: str, rules: Sequence[Rule], passages: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The rules the judge finds broken (`grades` ≥ the rule's `threshold`, else `VIOLATION_AT`);
    a rule with `judged = False` is not asked (its phrases are its whole check)."""
    rules = [r for r in rules if r.judged]
    if not rules:
        return []
    return [
        {"rule": rule.id, "check": "model", "detail": f"judged broken (p={p:.2f})", "p": round(p, 3)}
        for rule, p in zip(rules, grades(client, domain, text, rules, passages), strict=True)
        if p >= (rule.threshold if rule.threshold is not None else VIOLATION_AT)
    ]


def check(
    client: LLMClient, domain: str, text: str, rules: Sequence[Rule], passages: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Every violation found (deterministic first, then the model's)."""
    found = deterministic_violations(text, rules)
    found += judge(client, domain, text, rules, passages)
    return found


def append_mandated(
    solution: dict[str, Any], violations: list[dict[str, Any]], rules: Sequence[Rule]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Append the statement of every rule that declares one (`Rule.append`) and whose required
    phrase the solution lacks. Returns (violations left, violations fixed); the fixed ones are
    every violation of those rules, the model's included: the appended statement is what the rule
    asks for. `solution["text"]` and `solution["appended"]` (rule ids) are updated in place.
    `violations` are those `check` found against these `rules`."""
    by_id = {r.id: r for r in rules}
    mended = list(
        dict.fromkeys(v["rule"] for v in violations if v["check"] == "required" and by_id[v["rule"]].append)
    )
    if not mended:
        return violations, []
    solution["text"] = "\n\n".join([solution["text"].rstrip(), *(by_id[r].append for r in mended)])
    solution["appended"] = [*solution.get("appended", []), *mended]
    fixed = [{**v, "fixed": "appended"} for v in violations if v["rule"] in mended]
    return [v for v in violations if v["rule"] not in mended], fixed


def cited_texts(solution: dict[str, Any], passages: Sequence[KBChunk]) -> list[str]:
    """The texts of the passages the solution's verified citations name, in citation order."""
    by_id = {c.id: c.text for c in passages}
    ids = dict.fromkeys(c["chunk"] for c in solution.get("citations", []))
    return [by_id[i] for i in ids if i in by_id]


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
    violations, entry = _checked(client, domain, solution, passages, rules, attempt=1)
    report: list[dict[str, Any]] = [entry]
    kept = 1
    problems = retry_feedback(solution, violations, passages)
    if problems:
        second = solutions.generate(client, domain, issue, passages, rules, feedback=problems)
        second_violations, entry = _checked(client, domain, second, passages, rules, attempt=2)
        report.append(entry)
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


def solve_item(
    domain: str, rules: Sequence[Rule], client: LLMClient, item: tuple[KBIssue, Sequence[KBChunk]]
) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    """`solve` of one (issue, its retrieved passages): the unit a build's solutions stage sends out."""
    issue, passages = item
    return solve(client, domain, issue, passages, rules)


def _checked(
    client: LLMClient,
    domain: str,
    solution: dict[str, Any],
    passages: Sequence[KBChunk],
    rules: Sequence[Rule],
    *,
    attempt: int,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Check one attempt and append what the rules mandate: (violations left, its report entry)."""
    found = check(client, domain, solution["text"], rules, cited_texts(solution, passages))
    left, fixed = append_mandated(solution, found, rules)
    entry: dict[str, Any] = {"attempt": attempt, "violations": left, "citations": len(solution["citations"])}
    if fixed:
        entry["fixed"] = fixed
    return left, entry


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
