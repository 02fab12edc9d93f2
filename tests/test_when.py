"""Relative times in memory answers resolved against the date of the message that said them."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest

from knowtree.answer.when import only_the_day, resolve, resolved_answer, said_in
from knowtree.core import KnowTree
from knowtree.testing.models import keyword_except
from knowtree.types import Answer

SAID = date(2023, 5, 8)  # a Monday


@pytest.mark.parametrize(
    ("phrase", "meaning"),
    [
        ("last year", "2022"),
        ("this year", "2023"),
        ("next year", "2024"),
        ("two years ago", "2021"),
        ("yesterday", "7 May 2023"),
        ("last night", "7 May 2023"),
        ("the day before yesterday", "6 May 2023"),
        ("today", "8 May 2023"),
        ("tomorrow", "9 May 2023"),
        ("3 days ago", "5 May 2023"),
        ("last week", "the week before 8 May 2023"),
        ("next week", "the week after 8 May 2023"),
        ("two weeks ago", "the 2 weeks before 8 May 2023"),
        ("last weekend", "the weekend before 8 May 2023"),
        ("last month", "April 2023"),
        ("next month", "June 2023"),
        ("a month ago", "April 2023"),
        ("in two months", "July 2023"),
        ("last Saturday", "6 May 2023"),
        ("last Monday", "1 May 2023"),  # said on a Monday: the one before
        ("next Friday", "12 May 2023"),
        ("last January", None),  # a month name is not a unit here: left alone
    ],
)
def test_phrases_resolve_at_their_own_granularity(phrase: str, meaning: str | None) -> None:
    got = resolve(f"She said it was {phrase}.", SAID)
    assert got == ([(phrase, meaning)] if meaning else [])


def test_month_and_year_arithmetic_crosses_the_year() -> None:
    assert resolve("next month", date(2023, 12, 3)) == [("next month", "January 2024")]
    assert resolve("last month", date(2024, 1, 31)) == [("last month", "December 2023")]
    assert resolve("a couple of months ago", date(2024, 1, 31)) == [
        ("a couple of months ago", "November 2023")
    ]


def test_the_answer_keeps_its_words_and_says_what_they_mean() -> None:
    assert resolved_answer("last year", SAID) == "last year (2022, said on 8 May 2023)"
    assert (
        resolved_answer("Next month, camping", SAID) == "Next month (June 2023, said on 8 May 2023), camping"
    )
    assert resolved_answer("Paris", SAID) == "Paris"
    assert resolved_answer("lastyear and yesterday-ish", SAID) == "lastyear and yesterday-ish"


def ask_chat(
    tmp_path: Path, reply: dict[str, Any], chat: list[tuple[str, str, str]], question: str, mode: str
) -> Answer:
    """`question` asked of a memory holding `chat` (speaker, words, time), the answer step replying `reply`."""
    with KnowTree(tmp_path / "kb.db", model=keyword_except({"memory_answer": reply})) as kt:
        mem = kt.memory("chat")
        mem.embedder = "hash"
        mem.add([{"role": "user", "name": n, "content": c, "timestamp": t} for n, c, t in chat])
        return mem.ask(question, mode=mode)


@pytest.mark.parametrize("mode", ["walk", "retrieve"])
def test_a_memory_answer_resolves_against_the_message_that_said_it(tmp_path: Path, mode: str) -> None:
    chat = [
        ("Ann", "Nice sunrise painting!", "1 March 2024"),
        ("Mel", "I painted that sunrise last year.", "8 May 2023"),
    ]
    reply = {"found": True, "answer": "last year", "messages": [1, 2], "superseded": []}
    answer = ask_chat(tmp_path, reply, chat, "When did Mel paint the sunrise?", mode)
    # the date of message 2, which says "last year", not of message 1
    assert answer.answer == "last year (2022, said on 8 May 2023)"


def test_of_two_messages_saying_the_phrase_the_one_about_the_question_dates_it(tmp_path: Path) -> None:
    chat = [
        ("Jo", "My cousin visited last week, we baked bread.", "1 March 2024"),
        ("Jo", "I ran the city marathon last week!", "8 May 2023"),
    ]
    reply = {"found": True, "answer": "last week", "messages": [1, 2], "superseded": []}
    answer = ask_chat(tmp_path, reply, chat, "When did Jo run the marathon?", "retrieve")
    assert answer.answer == "last week (the week before 8 May 2023, said on 8 May 2023)"


def test_time_words_cited_from_a_message_that_does_not_say_them_are_dated_by_the_one_that_does(
    tmp_path: Path,
) -> None:
    chat = [
        ("Jo", "Dinner with family was lovely, here's a pic.", "22 December 2022"),
        ("Ann", "How are you doing?", "1 January 2023"),
        ("Jo", "I joined an online support group last week, it helps.", "1 January 2023"),
    ]
    reply = {"found": True, "answer": "last week", "messages": [1], "superseded": []}
    answer = ask_chat(tmp_path, reply, chat, "When did Jo join the online support group?", "retrieve")
    assert answer.answer == "last week (the week before 1 January 2023, said on 1 January 2023)"
    assert [c.line_start for c in answer.citations] == [3]
    assert any("says the answer's time words" in s.outcome for s in answer.trace)


def test_an_answer_that_is_only_the_message_s_date_is_spotted() -> None:
    for said in ("8 May 2023", "On May 8, 2023", "2023-05-08", "8 may", "on the 8th May 2023."):
        assert only_the_day(said, SAID), said
    for other in ("7 May 2023", "8 May 2023, at the support group", "May 2023", "Paris"):
        assert not only_the_day(other, SAID), other


def test_the_phrase_dating_what_the_question_asks_about() -> None:
    text = (
        "I wanted to tell you about my school event last week. I talked about my journey since I started"
        " transitioning three years ago."
    )
    assert said_in(text, {"speech", "school"}, SAID) == ("last week", "the week before 8 May 2023")
    assert said_in(text, {"transitioning"}, SAID) == ("three years ago", "2020")
    assert said_in(text, {"paris"}, SAID) is None  # two phrases, nothing to choose by
    assert said_in("I went yesterday.", {"went"}, SAID) == ("yesterday", "7 May 2023")
    assert said_in("I adopted a puppy! My sister came last week.", {"puppy", "adopt"}, SAID) is None
    assert said_in("No time words here.", {"school"}, SAID) is None


def test_a_memory_answer_giving_the_message_s_date_gets_the_message_s_time_words(tmp_path: Path) -> None:
    chat = [
        ("Ann", "How was your week?", "8 May 2023"),
        ("Cy", "I went to a support group yesterday.", "8 May 2023"),
    ]
    reply = {"found": True, "answer": "8 May 2023", "messages": [2], "superseded": []}
    answer = ask_chat(tmp_path, reply, chat, "When did Cy go to the support group?", "auto")
    assert answer.answer == "yesterday (7 May 2023, said on 8 May 2023)"
    step = next(s for s in answer.trace if s.outcome == "answered with the message's own time words")
    assert "'8 May 2023' is the date of message 2" in (step.reason or "")
