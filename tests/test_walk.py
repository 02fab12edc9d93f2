"""Answering by navigation: choices, reads, evidence checks, backtracking, and malformed replies.

Written against behaviour (status, citations, trace actions, call counts), not reason strings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import CORPUS, paragraphs
from knowtree import KnowTree
from knowtree.answer.evidence import grounded_share, locate, quote_score, supported
from knowtree.answer.walk import Walker, WalkOptions
from knowtree.construct.builder import build_tree
from knowtree.construct.taxonomy import DEFAULT_TAXONOMY
from knowtree.llm.base import Request
from knowtree.llm.client import ClientOptions, LLMClient
from knowtree.testing.models import FunctionModel, KeywordModel
from knowtree.types import Answer, Document, Node

BUDGET_Q = "Who approved the marketing budget?"
TWO_PART_Q = "Who approved the marketing budget and when did the launch happen?"
ABSENT_Q = "What is the airspeed velocity of an unladen swallow?"


def doc(path: str, text: str) -> Document:
    return Document(path=path, text=text, sha256=hashlib.sha256(text.encode()).hexdigest())


def build(docs: list[Document], **kwargs: Any) -> tuple[dict[str, Node], str]:
    result = build_tree(docs, LLMClient(KeywordModel()), taxonomy=DEFAULT_TAXONOMY, **kwargs)
    return {n.id: n for n in result.nodes}, result.root_id


@pytest.fixture(scope="module", params=[8, 2], ids=["flat", "branches"])
def tree(request: pytest.FixtureRequest) -> tuple[dict[str, Node], str]:
    """The three-document corpus: one level (max_children=8) or root -> branches -> leaves (2)."""
    return build([doc(name, text) for name, text in CORPUS.items()], max_children=request.param)


@pytest.fixture(scope="module")
def flat_tree() -> tuple[dict[str, Node], str]:
    return build([doc(name, text) for name, text in CORPUS.items()], max_children=8)


@pytest.fixture(scope="module")
def wide_tree() -> tuple[dict[str, Node], str]:
    """Eight leaves under the root, none about swallows."""
    nodes, root_id = build([doc("log.md", paragraphs(8))], chunk_size=200)
    assert len(nodes[root_id].children) == 8
    return nodes, root_id


def walk(
    tree: tuple[dict[str, Node], str],
    question: str,
    model: FunctionModel | None = None,
    **options: Any,
) -> tuple[Answer, FunctionModel]:
    nodes, root_id = tree
    model = model or KeywordModel()
    client = LLMClient(model, options=ClientOptions(repair_attempts=2, max_retries=0))
    return Walker(nodes, root_id, client, WalkOptions(**options)).ask(question), model


def wrap(override: Callable[[Request], Any]) -> FunctionModel:
    """KeywordModel, except where `override` returns something other than None."""
    keyword = KeywordModel()

    def reply(request: Request) -> Any:
        value = override(request)
        return keyword.reply(request) if value is None else value

    return FunctionModel(reply, id="wrapped")


def actions(answer: Answer) -> list[str]:
    return [s.action for s in answer.trace]


def leaf_of(nodes: dict[str, Node], file: str) -> Node:
    (leaf,) = [n for n in nodes.values() if n.is_leaf and n.spans[0].file == file]
    return leaf


# -- answers ---------------------------------------------------------------------------------------


def test_question_answered_by_one_leaf(tree: tuple[dict[str, Node], str]) -> None:
    nodes, _ = tree
    answer, model = walk(tree, BUDGET_Q)
    assert answer.status == "complete"
    assert answer.answer and "Alice Chen" in answer.answer
    (citation,) = answer.citations
    leaf = leaf_of(nodes, "budget.md")
    assert (citation.file, citation.node_id) == ("budget.md", leaf.id)
    assert (leaf.spans[0].line_start, leaf.spans[0].line_end) == (1, 5)  # the whole file is one chunk
    assert (citation.line_start, citation.line_end) == (4, 4)  # the quote's own line, not the chunk's
    assert "Alice Chen approved" in citation.quote and citation.quote in leaf.text
    assert "choose" in actions(answer) and "read" in actions(answer)
    assert actions(answer)[-1] == "read"
    assert answer.parts[0]["quote_at"] == [4, 4]  # the quoted sentence is on line 4 of budget.md
    assert answer.usage.calls == len(model.requests)
    read = [s for s in answer.trace if s.action == "read"]
    assert read[-1].node_id == leaf.id and read[-1].error is None


def test_a_quote_verified_without_being_verbatim_cites_where_it_matches_best(
    flat_tree: tuple[dict[str, Node], str],
) -> None:
    """A quote accepted with a word changed (most of its words in one stretch) cites the line where it
    matches best, as the index modes do (`search.cite`), not the whole chunk (budget.md, lines 1-5)."""
    nodes, _ = flat_tree
    leaf = leaf_of(nodes, "budget.md")
    near = "Alice Chen approved the marketing budget of 40000 euros on 3 March."
    claim = {"found": True, "quote": near, "answer": "Alice Chen"}

    def read_budget(request: Request) -> Any:
        prompt = request.messages[-1].content
        return {"part_1": claim} if request.schema_name == "read" and "Alice Chen" in prompt else None

    answer, _ = walk(flat_tree, BUDGET_Q, wrap(read_budget))
    assert answer.status == "complete" and locate(near, leaf.text) is None
    (citation,) = answer.citations
    assert (citation.node_id, citation.quote) == (leaf.id, near)
    assert (citation.line_start, citation.line_end) == (4, 4)


def test_two_part_question_across_two_documents(tree: tuple[dict[str, Node], str]) -> None:
    answer, _ = walk(tree, TWO_PART_Q)
    assert answer.status == "complete"
    assert len(answer.parts) == 2
    assert {c.file for c in answer.citations} == {"budget.md", "launch.md"}
    assert len(answer.citations) == 2
    assert "decompose" in actions(answer) and actions(answer)[-1] == "combine"
    assert answer.answer and "Alice Chen" in answer.answer and "September 14" in answer.answer
    assert all(p["answer"] and p["node_id"] for p in answer.parts)


def test_two_parts_in_different_branches_need_a_backtrack(tree: tuple[dict[str, Node], str]) -> None:
    answer, _ = walk(tree, "Who approved the marketing budget and why did the team choose PostgreSQL?")
    assert answer.status == "complete"
    assert {c.file for c in answer.citations} == {"budget.md", "database.md"}


def test_question_about_something_absent(tree: tuple[dict[str, Node], str]) -> None:
    answer, _ = walk(tree, ABSENT_Q)
    assert answer.status == "none"
    assert answer.answer is None and answer.citations == []
    assert answer.parts[0]["answer"] is None
    assert actions(answer).count("read") >= 1  # it looked before giving up


def test_partly_answerable_question_is_partial(tree: tuple[dict[str, Node], str]) -> None:
    answer, _ = walk(tree, "Who approved the marketing budget and what is the airspeed of a swallow?")
    assert answer.status == "partial"
    assert [c.file for c in answer.citations] == ["budget.md"]
    assert answer.answer and "Alice Chen" in answer.answer
    assert [p["answer"] is None for p in answer.parts] == [False, True]


def test_a_single_leaf_tree() -> None:
    nodes, root_id = build([doc("budget.md", CORPUS["budget.md"])])
    answer, model = walk((nodes, root_id), BUDGET_Q)
    assert answer.status == "complete" and answer.citations[0].file == "budget.md"
    assert [r.schema_name for r in model.requests] == ["read"]


@pytest.mark.parametrize(("attempts", "per_branch"), [(1, 1), (2, 1), (1, 2), (3, 2), (2, 3)])
def test_reads_are_bounded(wide_tree: tuple[dict[str, Node], str], attempts: int, per_branch: int) -> None:
    answer, model = walk(wide_tree, ABSENT_Q, max_branch_attempts=attempts, leaves_per_branch=per_branch)
    reads = [s for s in answer.trace if s.action == "read"]
    assert 1 <= len(reads) <= attempts * per_branch
    assert len({s.node_id for s in reads}) == len(reads)  # no leaf is read twice
    assert sum(1 for r in model.requests if r.schema_name == "read") == len(reads)
    assert answer.status == "none"


def test_facts_late_in_a_large_leaf_are_readable(tmp_path: Path) -> None:
    filler = " ".join(f"Filler sentence number {i} talks about nothing in particular." for i in range(130))
    (tmp_path / "big.md").write_text(filler + "\n\n" + CORPUS["budget.md"])
    with KnowTree(tmp_path / "kb.db", model=KeywordModel(), chunk_size=9000) as kt:
        assert kt.build([str(tmp_path / "big.md")], tree="b").leaves == 1
        answer = kt.tree("b").ask(BUDGET_Q)
    assert answer.status == "complete"


def test_on_step_sees_every_step(flat_tree: tuple[dict[str, Node], str]) -> None:
    nodes, root_id = flat_tree
    seen: list[str] = []
    walker = Walker(nodes, root_id, LLMClient(KeywordModel()), on_step=lambda s: seen.append(s.action))
    answer = walker.ask(TWO_PART_Q)
    assert seen == actions(answer)


def test_repeated_question_is_answered_from_the_cache(flat_tree: tuple[dict[str, Node], str]) -> None:
    nodes, root_id = flat_tree
    model = KeywordModel()
    client = LLMClient(model)
    first = Walker(nodes, root_id, client).ask(TWO_PART_Q)
    calls = len(model.requests)
    second = Walker(nodes, root_id, client).ask(TWO_PART_Q)
    assert len(model.requests) == calls
    assert second.usage.calls == 0 and second.usage.cached == first.usage.calls
    assert second.answer == first.answer
    assert all(s.cached for s in second.trace if s.tokens)


# -- malformed and untrustworthy replies -----------------------------------------------------------


def test_answer_usage_counts_calls_spent_on_invalid_replies(flat_tree: tuple[dict[str, Node], str]) -> None:
    model = wrap(lambda r: "<<garbage>>" if r.schema_name == "choose" else None)
    nodes, root_id = flat_tree
    client = LLMClient(model)
    answer = Walker(nodes, root_id, client).ask(BUDGET_Q)
    assert answer.usage.calls == client.usage.calls == len(model.requests)
    assert answer.usage.cached == client.usage.cached


def test_garbage_choose_replies_fall_back_and_the_walk_proceeds(
    flat_tree: tuple[dict[str, Node], str],
) -> None:
    model = wrap(lambda r: "<<garbage>>" if r.schema_name == "choose" else None)
    answer, _ = walk(flat_tree, BUDGET_Q, model)
    chooses = [s for s in answer.trace if s.action == "choose" and len(s.options) > 1]
    assert chooses and all(s.error for s in chooses)
    assert all(s.choice in s.options for s in chooses)
    # each failed choice was re-asked with the error fed back (repair_attempts=2)
    assert 2 * len(chooses) <= sum(1 for r in model.requests if r.schema_name == "choose") <= 3 * len(chooses)
    assert answer.status == "complete"  # the fallback still reaches the budget leaf
    assert answer.citations[0].file == "budget.md"


def test_out_of_range_choice_is_repaired(flat_tree: tuple[dict[str, Node], str]) -> None:
    state = {"bad": 1}

    def once(request: Request) -> Any:
        if request.schema_name == "choose" and state["bad"]:
            state["bad"] -= 1
            return {"reason": "x", "choice": 7}
        return None

    model = wrap(once)
    answer, _ = walk(flat_tree, BUDGET_Q, model)
    chooses = [r for r in model.requests if r.schema_name == "choose"]
    assert len(chooses) >= 2
    assert "not valid" in chooses[1].messages[-1].content and "7" in chooses[1].messages[-1].content
    assert answer.status == "complete" and answer.citations[0].file == "budget.md"


def test_always_out_of_range_choice_falls_back(flat_tree: tuple[dict[str, Node], str]) -> None:
    model = wrap(lambda r: {"reason": "x", "choice": 7} if r.schema_name == "choose" else None)
    answer, _ = walk(flat_tree, BUDGET_Q, model)
    chooses = [s for s in answer.trace if s.action == "choose" and len(s.options) > 1]
    assert chooses and all(s.error for s in chooses)
    assert all(s.choice in s.options for s in chooses)
    assert answer.status == "complete"


def test_invented_quote_is_never_an_answer(flat_tree: tuple[dict[str, Node], str]) -> None:
    invented = {"found": True, "quote": "The moon is made of green cheese.", "answer": "Bob Marley"}
    model = wrap(lambda r: {"part_1": invented} if r.schema_name == "read" else None)
    answer, _ = walk(flat_tree, BUDGET_Q, model)
    assert answer.status == "none"
    assert answer.answer is None and answer.citations == []
    reads = [s for s in answer.trace if s.action == "read"]
    assert reads and all(s.error is None for s in reads)  # well-formed, just not believed


def test_real_quote_with_an_invented_answer_is_rejected(flat_tree: tuple[dict[str, Node], str]) -> None:
    real = "Alice Chen approved the marketing budget of 40000 euros on March 3."
    claim = {"found": True, "quote": real, "answer": "Bob Marley approved it in Kingston"}
    model = wrap(lambda r: {"part_1": claim} if r.schema_name == "read" else None)
    answer, _ = walk(flat_tree, BUDGET_Q, model)
    assert answer.status == "none" and answer.citations == []


def test_half_invented_two_part_answer_is_partial(flat_tree: tuple[dict[str, Node], str]) -> None:
    """The launch date is made up in every read: only the budget part may count."""

    def lie_about_launch(request: Request) -> Any:
        if request.schema_name != "read":
            return None
        reply = KeywordModel().reply(request)
        prompt = request.messages[-1].content
        for key, value in reply.items():
            if f"{key}: when did the launch happen" in prompt:
                value.update(found=True, quote="The launch happened on May 1 in Paris.", answer="May 1")
        return reply

    answer, _ = walk(flat_tree, TWO_PART_Q, wrap(lie_about_launch))
    assert answer.status == "partial"
    assert [c.file for c in answer.citations] == ["budget.md"]
    assert answer.answer and "May 1" not in answer.answer


def test_malformed_read_reply_is_recorded_not_invented(flat_tree: tuple[dict[str, Node], str]) -> None:
    model = wrap(lambda r: "found: yes, Alice" if r.schema_name == "read" else None)
    answer, _ = walk(flat_tree, BUDGET_Q, model)
    reads = [s for s in answer.trace if s.action == "read"]
    assert reads and all(s.error for s in reads)
    assert answer.status == "none" and answer.answer is None and answer.citations == []


def test_garbage_decompose_keeps_the_question_whole(flat_tree: tuple[dict[str, Node], str]) -> None:
    model = wrap(lambda r: "???" if r.schema_name == "decompose" else None)
    answer, _ = walk(flat_tree, TWO_PART_Q, model)
    (step,) = [s for s in answer.trace if s.action == "decompose"]
    assert step.error
    assert len(answer.parts) == 1 and answer.status in ("complete", "partial", "none")


def test_unrelated_decomposition_is_ignored(flat_tree: tuple[dict[str, Node], str]) -> None:
    model = wrap(lambda r: {"parts": ["What colour is the sky?"]} if r.schema_name == "decompose" else None)
    answer, _ = walk(flat_tree, TWO_PART_Q, model)
    (step,) = [s for s in answer.trace if s.action == "decompose"]
    assert step.error
    assert [p["part"] for p in answer.parts] == [TWO_PART_Q]


def test_a_split_into_one_part_keeps_the_question_itself(flat_tree: tuple[dict[str, Node], str]) -> None:
    """One fact asked: the question is looked for as the user wrote it, not as the model reworded
    it (a rewording drops qualifiers: the company, the quarter)."""
    reworded = "Who approved the budget?"
    model = wrap(lambda r: {"parts": [reworded]} if r.schema_name == "decompose" else None)
    answer, _ = walk(flat_tree, TWO_PART_Q, model)
    (step,) = [s for s in answer.trace if s.action == "decompose"]
    assert not step.error and "stays whole" in step.outcome and reworded in step.outcome
    assert [p["part"] for p in answer.parts] == [TWO_PART_Q]


def test_garbage_combine_keeps_the_findings(flat_tree: tuple[dict[str, Node], str]) -> None:
    model = wrap(lambda r: "" if r.schema_name == "combine" else None)
    answer, _ = walk(flat_tree, TWO_PART_Q, model)
    assert answer.status == "complete" and len(answer.citations) == 2
    (step,) = [s for s in answer.trace if s.action == "combine"]
    assert step.error
    assert answer.answer and "Alice Chen" in answer.answer and "September 14" in answer.answer


# -- evidence checks -------------------------------------------------------------------------------

TEXT = "Alice Chen approved the marketing budget of 40000 euros on March 3. Travel costs wait."


def test_quote_score_exact() -> None:
    assert quote_score("Alice Chen approved the marketing budget", TEXT) == 1.0
    assert quote_score("alice   chen APPROVED the marketing budget.", TEXT) == 1.0  # case, spacing


def test_quote_score_fuzzy() -> None:
    # one word of eight changed: mostly there
    score = quote_score("Alice Chen approved the sales budget of 40000", TEXT)
    assert 0.75 <= score < 1.0


def test_quote_score_absent() -> None:
    assert quote_score("The moon is made of green cheese", TEXT) < 0.3
    assert quote_score("", TEXT) == 0.0
    assert quote_score("Bob approved", TEXT) == 0.0  # a short quote must match exactly


def test_quote_score_respects_word_boundaries() -> None:
    assert quote_score("cat sat", "The concat sat down.") == 0.0


def test_grounded_share() -> None:
    question = "Who approved the marketing budget?"
    assert grounded_share("Alice Chen", question, TEXT) == 1.0
    assert grounded_share("Alice Chen and Bob Marley", question, TEXT) == 0.5
    assert grounded_share("Bob Marley", question, TEXT) == 0.0
    assert grounded_share("the marketing budget", question, TEXT) == 1.0  # nothing new to check


def test_supported() -> None:
    q = "Who approved the marketing budget?"
    quote = "Alice Chen approved the marketing budget of 40000 euros on March 3."
    assert supported(quote, "Alice Chen", q, TEXT)[0] is True
    assert supported(quote, "", q, TEXT)[0] is False
    assert supported(quote, "Bob Marley", q, TEXT)[0] is False
    assert supported("The moon is made of green cheese.", "Alice Chen", q, TEXT)[0] is False
    _, why = supported("The moon is made of green cheese.", "Alice Chen", q, TEXT)
    assert isinstance(why, str) and why


def test_locate() -> None:
    start, end = locate("approved  the MARKETING budget", TEXT) or (0, 0)
    assert TEXT[start:end] == "approved the marketing budget"
    assert locate("nowhere to be found", TEXT) is None
    assert locate("", TEXT) is None
