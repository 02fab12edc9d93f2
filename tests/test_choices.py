"""A multiple-choice question's options as search queries (`knowtree.retrieve.choices`), through the
product's one retrieval sequence (`Tree.retrieve`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowtree.retrieve.choices import choice_queries, split_choices

QUESTION = "Why did the keeper leave?\n\n (A) The storm broke the mast\n (B) He lost the map\n(C) To sing"


def test_split_choices_reads_lettered_options_one_per_line() -> None:
    assert split_choices(QUESTION) == (
        "Why did the keeper leave?",
        ["The storm broke the mast", "He lost the map", "To sing"],
    )
    assert choice_queries(QUESTION) == [
        "Why did the keeper leave? The storm broke the mast",
        "Why did the keeper leave? He lost the map",
        "Why did the keeper leave? To sing",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Why did the keeper leave? (A) The storm broke the mast (B) He lost the map (C) To sing",  # one line
        "Why did the keeper leave?\nA) The storm broke the mast\nB) He lost the map\nC) To sing",
        "Why did the keeper leave?\n  A. The storm broke the mast\n  B. He lost the map\n  C. To sing",
    ],
)
def test_options_typed_other_ways(text: str) -> None:
    assert split_choices(text) == split_choices(QUESTION)


@pytest.mark.parametrize(
    "text",
    [
        "Who approved the budget?",
        "Plan A. Then plan B) if that fails?",  # letters inside lines are no options
        "Which?\n(A) a road (B) b\n(B) c",  # a letter twice
        "What does (A) mean in the formula?",  # a letter in brackets inside a line is no option
        "Which?\n(A) one",  # one option is no choice
        "Which?\n(B) one\n(A) two",  # not lettered in order
        "Which?\n(A) one\n(C) two",  # a letter skipped
    ],
)
def test_other_questions_are_searched_as_they_are(text: str) -> None:
    assert split_choices(text) is None
    assert choice_queries(text) == []


def test_an_empty_option_makes_no_queries() -> None:
    assert split_choices("Which?\n(A)\n(B) two") == ("Which?", ["", "two"])
    assert choice_queries("Which?\n(A)\n(B) two") == []


def test_every_tree_search_adds_a_query_per_option(tmp_path: Path) -> None:
    """`search_index` (what `Tree.retrieve`, `--mode retrieve` and `--mode nav` call) ranks a
    multiple-choice question once whole and once per option, by turns; `choices=False` or explicit
    `also` queries replace that."""
    from knowtree import KnowTree
    from knowtree.retrieve.treesearch import default_params, fuse, rank_tree, search_index
    from knowtree.testing import KeywordModel

    paras = [f"On day {i} a storm at sea shook the boat in the night, and the mast held." for i in range(40)]
    paras.insert(21, "Later the keeper lost the map and had to go.")
    (tmp_path / "log.md").write_text("# Log\n\n" + "\n\n".join(paras) + "\n")
    with KnowTree(tmp_path / "kb.db", model=KeywordModel(), summaries="none", read_env=False) as kt:
        assert kt.build([str(tmp_path / "log.md")], tree="log").usage.calls == 0
        index = kt.tree_index("log")

        def ranked(q: str) -> list[str]:
            return rank_tree(index, q, params=default_params("document")).pieces

        queries = [QUESTION, *choice_queries(QUESTION)]
        fused = fuse([rank_tree(index, q, params=default_params("document")) for q in queries]).pieces
        assert fused != ranked(QUESTION)  # the options' rankings change the order
        assert search_index(index, QUESTION, 200, embedder=None).ranking.pieces == fused
        assert search_index(index, QUESTION, 200, embedder=None, choices=False).ranking.pieces == ranked(
            QUESTION
        )
        also = search_index(index, QUESTION, 200, embedder=None, also=["the map"]).ranking.pieces
        assert (
            also
            == fuse(
                [rank_tree(index, q, params=default_params("document")) for q in [QUESTION, "the map"]]
            ).pieces
        )
        got = " ".join(ev.text for ev in kt.tree("log").retrieve(QUESTION, budget_tokens=200, embedder=None))
        assert "lost the map" in got
