"""The checks that keep a small model's invented answers out: question kinds, context, multiple choice."""

from __future__ import annotations

from knowtree.answer.evidence import (
    fits_question,
    is_multiple_choice,
    question_core,
    relevant_context,
    supported,
)
from knowtree.answer.evidence import option_letter as _option_letter
from knowtree.answer.evidence import option_text as _option_text
from knowtree.answer.walk import Walker, WalkOptions
from knowtree.llm.client import LLMClient
from knowtree.testing.models import FunctionModel, KeywordModel
from knowtree.types import Node, NodeKind, NodeMeta, Span

TICKETS = (
    "LH-21: Migrate the prototype store from SQLite to PostgreSQL\n"
    "Status: In review. Assignee: Samir Haddad. Created 2024-03-12.\n\n"
    "LH-26: Password reset answers point to an outdated article\n"
    "Status: Done. Assignee: Tomas Reyes.\n"
)
HANDBOOK = (
    "Production deploys happen on Tuesdays and Thursdays. To roll back, redeploy the previous release tag; "
    "database migrations must therefore always be backward compatible for one release.\n"
)


def test_who_question_needs_someone() -> None:
    q = "Who is assigned to the migration from SQLite to PostgreSQL?"
    assert fits_question(q, "Samir Haddad")[0]
    assert fits_question(q, "the backend engineer")[0]
    ok, why = fits_question(q, "The migration must be backward compatible.")
    assert not ok and "who" in why


def test_when_and_how_many_questions_need_times_and_numbers() -> None:
    assert fits_question("When did it ship?", "On 12 September 2024")[0]
    assert not fits_question("When did it ship?", "It shipped with offline mode")[0]
    assert fits_question("How many tickets are open?", "Three tickets")[0]
    assert not fits_question("How many tickets are open?", "Some are open")[0]


def test_a_real_but_unrelated_quote_is_rejected() -> None:
    q = "Who is assigned to the migration from SQLite to PostgreSQL?"
    bad = supported(
        "database migrations must therefore always be backward compatible for one release.",
        "The migration from SQLite to PostgreSQL must be backward compatible.",
        q,
        HANDBOOK,
    )
    assert not bad[0]
    good = supported("Status: In review. Assignee: Samir Haddad.", "Samir Haddad", q, TICKETS)
    assert good == (True, "fits")
    invented = supported("Status: In review. Assignee: Samir Haddad.", "John Smith", q, TICKETS)
    assert not invented[0] and "grounded" in invented[1]


def test_relevant_context_looks_around_the_quote() -> None:
    q = "Who is assigned to the migration from SQLite to PostgreSQL?"
    assert relevant_context(q, "Assignee: Samir Haddad.", TICKETS) >= 0.5
    far = "Assignee: Nora Lind." + " filler" * 200 + "\n" + TICKETS
    assert relevant_context(q, "Assignee: Nora Lind.", far) < 0.4


def test_multiple_choice_detection_and_core() -> None:
    inline = "Why did they leave? (A) fear (B) boredom (C) duty (D) love Answer with the letter."
    lines = "Why did they leave?\nA. fear\nB. boredom\nC. duty\nD. love"
    assert is_multiple_choice(inline) and is_multiple_choice(lines)
    assert not is_multiple_choice("Who met A and B?")
    assert question_core(inline).strip() == "Why did they leave?"
    assert question_core("Who is it?") == "Who is it?"
    assert _option_letter("B", inline) == "B"
    assert _option_letter("(C) duty, mostly", inline) == "C"
    assert _option_letter("A man came", inline) is None
    assert _option_text(inline, "B") == "boredom"


def _one_leaf_walker(model: FunctionModel) -> Walker:
    text = "The crew left the door open. Nobody knows why the captain ordered it."
    span = Span(file="story.md", start=0, end=len(text), line_start=1, line_end=1)
    leaf = Node(
        id="leaf", kind=NodeKind.LEAF, level=0, meta=NodeMeta(summary="A story."), text=text, spans=[span]
    )
    root = Node(id="root", kind=NodeKind.ROOT, level=1, meta=leaf.meta, children=["leaf"], spans=[span])
    return Walker({"leaf": leaf, "root": root}, "root", LLMClient(model), WalkOptions(max_branch_attempts=1))


def test_unverified_multiple_choice_pick_is_partial_and_says_so() -> None:
    def reply(request):
        return {"part_1": {"found": True, "quote": "(B) boredom", "answer": "B"}}

    walker = _one_leaf_walker(FunctionModel(reply))
    answer = walker.ask("Why was the door open? (A) fear (B) boredom (C) duty (D) love")
    assert answer.status == "partial"
    assert (
        answer.answer is not None
        and answer.answer.startswith("(B) boredom")
        and "unverified" in answer.answer
    )
    assert [c.file for c in answer.citations] == ["story.md"]


def test_free_form_unverified_claim_is_never_an_answer() -> None:
    def reply(request):
        return {
            "part_1": {"found": True, "quote": "The captain was bored.", "answer": "Because he was bored"}
        }

    answer = _one_leaf_walker(FunctionModel(reply)).ask("Why was the door open?")
    assert answer.status == "none" and answer.answer is None and answer.citations == []


def test_rephrased_parts_are_merged() -> None:
    def reply(request):
        if request.schema_name == "decompose":
            return {
                "parts": [
                    "Why did the crew leave the door open?",
                    "What was the reason the crew left the door open?",
                    "Who ordered the door open?",
                ]
            }
        return KeywordModel().reply(request)

    walker = _one_leaf_walker(FunctionModel(reply))
    answer = walker.ask("Why did the crew leave the door open, and who ordered it, and when did that happen?")
    decompose = next(s for s in answer.trace if s.action == "decompose")
    assert decompose.outcome.startswith("2 part(s)")


RELEASE = (
    "Release 7.1 of the Atlas mobile app shipped on 12 September 2024. Karin Lund was the release manager. "
    "The release added offline mode. The next release, 7.2, is planned for November and will add barcode scanning."
)


def test_a_statement_about_another_version_does_not_answer() -> None:
    quote = "Karin Lund was the release manager."
    assert not supported(quote, "Karin Lund", "Who will be the release manager of release 7.2?", RELEASE)[0]
    assert supported(quote, "Karin Lund", "Who was the release manager of release 7.1?", RELEASE)[0]
    assert supported(
        "The next release, 7.2, is planned for November", "November", "When is 7.2 planned?", RELEASE
    )[0]


def test_a_refusal_is_not_an_answer() -> None:
    ok, why = supported(
        "Release 7.1", "The text does not answer this question.", "Which company made it?", RELEASE
    )
    assert not ok and "does not answer" in why
    assert not supported("Release 7.1", "Not mentioned", "What was the budget?", RELEASE)[0]


def test_a_quote_accepted_without_being_verbatim_is_judged_where_it_is() -> None:
    """The 1.5B model quoted "- PostgreSQL with the pgvector extension. The team chose PostgreSQL." of
    a line that has no list dash: the quote is accepted (most of its words in one stretch), so the
    question's words are looked for around that stretch, not around the quote alone."""
    text = (
        "Attendees: Maria, Dev.\n\nDev presented two storage options for the knowledge index: MongoDB,\n"
        "and PostgreSQL with the pgvector extension. The team chose PostgreSQL because one database\n"
        "keeps backups in one place.\n"
    )
    question = "Which database did the team choose for Lighthouse?"
    quote = "- PostgreSQL with the pgvector extension. The team chose PostgreSQL."
    assert relevant_context(question, quote, text) >= 0.5  # "database" and "team" are around it
    assert supported(quote, "PostgreSQL", question, text) == (True, "fits")


def test_a_quote_with_another_number_is_not_accepted() -> None:
    text = "Financial statements\nTotal revenue was 42 million dollars in 2021.\n"
    question = "What total revenue do the financial statements show?"
    ok, why = supported("Revenue was 99 million dollars.", "99 million dollars", question, text)
    assert not ok and "99" in why
    assert supported("Total revenue was 42 million dollars", "42 million dollars", question, text)[0]
    assert supported("revenue was 1,250 million", "1250 million", question, "Total revenue was 1250 million.")[0]
