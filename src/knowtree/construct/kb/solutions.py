"""Solutions by retrieval-augmented generation (the seed's Prompt G.9), with verified citations.

Per issue node: the issue (title + metadata) is the query for the hybrid index over the
contextualized chunks; the top `TOP_K` chunks, the domain rules and the issue go to the model, which
writes a solution at the issue's granularity and cites passages by number with a quote. Every quote
is checked against its chunk without the model (as `navigate.evidence` checks answers): a quote
found in another of the passages shown is cited from there (`cited_as`: the number the reply gave);
a citation whose quote is in none of them is dropped and recorded under `unverified`; a solution
left without a verified citation is marked `ungrounded`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from knowtree.ingest.kb_attributes import show
from knowtree.ingest.kb_inputs import Rule
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import ask, string
from knowtree.records import KBChunk, KBIssue
from knowtree.retrieve.kbindex import KBIndexes
from knowtree.text import quote_score

TOP_K = 5
CHUNK_SHOWN = 700
SOLUTION_CHARS = 700  # asked for: the schema's maxLength, kept by backends that enforce it
# kept: the embedded engine's grammar does not always enforce maxLength, and a 900-character medical solution
# failed validation three times and crashed a `kb ask`; a longer one is cut at a sentence end and the
# cut recorded (`cut_from`), as tree summaries are (`construct.metadata.cap_summary`)
SOLUTION_KEEP = 1500
QUOTE_CHARS = 200
QUOTE_MIN = 0.9  # share of the quote's words found in one stretch of the chunk
MAX_CITATIONS = 3
# Grammar limits of the embedded engine (llama.cpp): a string's maxLength and an array's maxItems
# expand into repeated grammar rules, and a 1,500-character solution beside an array of quoted
# citations made it refuse the grammar ("number of rules ... repeated ... exceeds sane defaults").
# So: strings ≤ 700 characters (as the rest of knowtree), arrays of objects unbounded in the schema
# and cut to MAX_CITATIONS here.
MIN_QUOTE_WORDS = 4  # "Bixby" is found in half the manual: a citation must quote a real statement


def solution_model(chunks: int) -> type[BaseModel]:
    number: Any = Literal[tuple(range(1, max(1, chunks) + 1))]  # type: ignore[misc]
    citation = create_model(
        "SolutionCitation",
        __config__=ConfigDict(extra="ignore"),
        passage=(number, ...),
        # asked for ≤ QUOTE_CHARS (the schema's maxLength), not refused above it: the embedded engine's
        # grammar does not always enforce it, and a 250-character quote failed validation three
        # times and lost a medical solution; a long quote is verified like any other
        quote=(str, string(QUOTE_CHARS, ...)),
    )
    return create_model(
        f"Solution{chunks}",
        __config__=ConfigDict(extra="ignore"),
        solution=(str, Field(min_length=1, json_schema_extra={"maxLength": SOLUTION_CHARS})),
        citations=(list[citation], Field(default_factory=list)),  # type: ignore[valid-type]
    )


def issue_query(issue: KBIssue) -> str:
    meta = show(issue.metadata)
    return issue.title if meta == "general" else f"{issue.title} ({meta})"


def retrieve_chunks(
    indexes: KBIndexes, chunks: dict[str, KBChunk], issue: KBIssue, k: int = TOP_K
) -> list[KBChunk]:
    hits = indexes.chunks.search(issue_query(issue), k=k)
    return [chunks[pid] for pid, _ in hits if pid in chunks]


def rules_text(rules: Sequence[Rule]) -> str:
    return "\n".join(f"{i}. {r.text}" for i, r in enumerate(rules, start=1))


def generate(
    client: LLMClient,
    domain: str,
    issue: KBIssue,
    passages: Sequence[KBChunk],
    rules: Sequence[Rule],
    *,
    feedback: str = "",
) -> dict[str, Any]:
    """One solution: {text, citations: [{chunk, doc_id, quote}], unverified: [...], chunks: [ids]}.
    `feedback`: what was wrong with a previous version (`compliance.solve` writes it), put in the prompt."""
    shown = (
        "\n\n".join(
            f"[{i}] ({' > '.join(c.path)}) {c.text[:CHUNK_SHOWN]}" for i, c in enumerate(passages, start=1)
        )
        or "(no passage found)"
    )
    model = solution_model(len(passages))
    reply = ask(
        client,
        model,
        "kb_solution",
        domain=domain or "general",
        issue=issue.title,
        metadata=show(issue.metadata),
        rules=rules_text(rules) or "(none)",
        chunks=shown,
        feedback=f"\n{feedback}\n" if feedback else "",
        purpose="kb_solution",
        max_tokens=450,
    ).value
    cited, unverified = verify_citations(reply.citations[:MAX_CITATIONS], passages)
    text = reply.solution.strip()
    kept = cap(text)
    if len(kept) >= SOLUTION_CHARS - 1 and not ends_a_sentence(kept):
        # the embedded engine's grammar closes the string at the schema's maxLength, mid-sentence
        # ("Avoid prescribing medicines or giving"): keep the whole sentences before it
        whole = cap(kept, len(kept) - 1)  # a hard cut when no sentence ends before
        kept = whole if ends_a_sentence(whole) else kept
    out: dict[str, Any] = {
        "text": kept,
        "citations": cited,
        "unverified": unverified,
        "chunks": [c.id for c in passages],
    }
    if len(out["text"]) < len(text):
        out["cut_from"] = len(text)
    return out


def ends_a_sentence(text: str) -> bool:
    return text.rstrip().rstrip("\"')]").endswith((".", "!", "?"))


def cap(text: str, limit: int = SOLUTION_KEEP) -> str:
    """The text, or its longest opening of whole sentences within `limit` characters (a hard cut
    when no sentence ends there)."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    end = max(head.rfind(". "), head.rfind(".\n"), head.rfind("! "), head.rfind("? "))
    return head[: end + 1] if end > 0 else head.rstrip()


def verify_citations(citations: Sequence[Any], passages: Sequence[KBChunk]) -> tuple[list[dict], list[dict]]:
    """Split citations into verified (quote found in a shown chunk) and unverified ones.

    A quote that is not in the passage its number names but is in another passage shown with it
    is cited from where it is, the reply's number kept as `cited_as`: the embedded 1.5B model
    numbered 5 of the 9 unverified quotes of the dev TV solutions wrong, each copied word for word
    from another of the five passages (benchmarks/RESULTS.md), and dropping them cost a regeneration."""
    ok: list[dict] = []
    bad: list[dict] = []
    for c in citations:
        index = int(c.passage) - 1
        if not 0 <= index < len(passages):
            bad.append({"passage": c.passage, "quote": c.quote, "why": "no such passage"})
            continue
        chunk = passages[index]
        entry: dict[str, Any] = {
            "chunk": chunk.id,
            "doc_id": chunk.doc_id,
            "source": chunk.source,
            "quote": c.quote.strip(),
        }
        if len(c.quote.split()) < MIN_QUOTE_WORDS:
            bad.append({**entry, "why": f"quote shorter than {MIN_QUOTE_WORDS} words: too short to verify"})
            continue
        if quote_score(c.quote, chunk.text) < QUOTE_MIN:
            there = next((p for p in passages if p is not chunk and quote_score(c.quote, p.text) >= QUOTE_MIN), None)
            if there is None:
                bad.append({**entry, "why": "quote not found in the passage"})
                continue
            entry = {
                "chunk": there.id,
                "doc_id": there.doc_id,
                "source": there.source,
                "quote": entry["quote"],
                "cited_as": int(c.passage),
            }
        if all((e["chunk"], e["quote"]) != (entry["chunk"], entry["quote"]) for e in ok):
            ok.append(entry)
    return ok, bad
