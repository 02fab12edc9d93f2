"""Relative times in an answer, resolved against the date of the message that said them.

A chat says "last year", "yesterday", "next month", "two weeks ago"; an answer that repeats the phrase
is useless a week later. The memory answer prompt asks the model to resolve such phrases against
the message's date, and a small model mostly does not (it answers "last year" for "When did Melanie
paint a sunrise?"). So the answer step resolves them itself, from the cited message's timestamp,
and shows both: "last year (2022, said on 8 May 2023)".

Written here rather than taken from `dateparser` / `parsedatetime`: those turn a phrase into one
moment ("last year" → 8 May 2022), while an answer needs the period the phrase names (the year
2022, the month of June 2023, the week before 9 June 2023), at the phrase's own granularity.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, timedelta

from knowtree.text import SENTENCE_BREAK, words

_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "couple of": 2,
}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_COUNT = r"(?P<n>\d{1,2}|a couple of|couple of|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_PHRASE = re.compile(
    r"(?<![\w-])(?:"
    r"(?P<dby>the day before yesterday)"
    r"|(?P<yesterday>yesterday|last night)"
    r"|(?P<today>today|tonight|this morning|this afternoon|this evening)"
    r"|(?P<tomorrow>tomorrow)"
    r"|(?P<rel>last|next|this|past) (?P<unit>weekend|week|month|year|" + "|".join(_WEEKDAYS) + r")"
    r"|" + _COUNT + r" (?P<ago_unit>days?|weeks?|months?|years?) ago"
    r"|in " + _COUNT.replace("?P<n>", "?P<n2>") + r" (?P<in_unit>days?|weeks?|months?|years?)"
    r")(?![\w-])",
    re.IGNORECASE,
)


def day_text(d: date) -> str:
    return f"{d.day} {d:%B %Y}"


def _month(d: date, shift: int) -> date:
    total = d.year * 12 + d.month - 1 + shift
    return date(total // 12, total % 12 + 1, 1)


def _count(value: str) -> int:
    value = value.lower()
    return int(value) if value.isdigit() else _NUMBERS[value]


def _span(n: int, unit: str, said: date, sign: int) -> str:
    """`n` units before (sign -1) or after (+1) the day `said`, at the unit's granularity."""
    unit = unit.lower().rstrip("s")
    if unit == "day":
        return day_text(said + timedelta(days=sign * n))
    if unit == "week":
        word = "week" if n == 1 else f"{n} weeks"
        return f"the {word} {'before' if sign < 0 else 'after'} {day_text(said)}"
    if unit == "month":
        return f"{_month(said, sign * n):%B %Y}"
    return str(said.year + sign * n)


def _relative(rel: str, unit: str, said: date) -> str:
    rel, unit = rel.lower(), unit.lower()
    sign = {"last": -1, "past": -1, "next": 1, "this": 0}[rel]
    if unit in _WEEKDAYS:
        target = _WEEKDAYS.index(unit)
        if sign < 0:  # the latest such day before the day it was said
            back = (said.weekday() - target) % 7 or 7
            return day_text(said - timedelta(days=back))
        ahead = (target - said.weekday()) % 7
        return day_text(said + timedelta(days=ahead or (7 if sign > 0 else 0)))
    if unit in ("week", "weekend"):
        where = {-1: "before", 1: "after", 0: "of"}[sign]
        return f"the {unit} {where} {day_text(said)}"
    if unit == "month":
        return f"{_month(said, sign):%B %Y}"
    return str(said.year + sign)


def phrases(text: str) -> list[str]:
    """The relative time phrases in `text`, in order, each once (any case): what `resolve` dates."""
    return list({m.group(0).lower(): m.group(0) for m in _PHRASE.finditer(text)}.values())


def resolve(text: str, said: date) -> list[tuple[str, str]]:
    """Every relative time phrase in `text` with what it means when said on `said`:
    [("last year", "2022"), ("yesterday", "7 May 2023")], in order, each phrase once."""
    out: dict[str, str] = {}
    for m in _PHRASE.finditer(text):
        phrase = m.group(0)
        if phrase.lower() in (k.lower() for k in out):
            continue
        if m.group("dby"):
            out[phrase] = day_text(said - timedelta(days=2))
        elif m.group("yesterday"):
            out[phrase] = day_text(said - timedelta(days=1))
        elif m.group("today"):
            out[phrase] = day_text(said)
        elif m.group("tomorrow"):
            out[phrase] = day_text(said + timedelta(days=1))
        elif m.group("rel"):
            out[phrase] = _relative(m.group("rel"), m.group("unit"), said)
        elif m.group("ago_unit"):
            out[phrase] = _span(_count(m.group("n")), m.group("ago_unit"), said, -1)
        else:
            out[phrase] = _span(_count(m.group("n2")), m.group("in_unit"), said, 1)
    return list(out.items())


def resolved_answer(answer: str, said: date) -> str:
    """`answer` with each relative time phrase followed by what it means, once:
    "last year" said on 8 May 2023 → "last year (2022, said on 8 May 2023)". Unchanged when the
    answer has no such phrase."""
    found = resolve(answer, said)
    if not found:
        return answer
    out = answer
    for phrase, meaning in found:
        note = f"{phrase} ({meaning}, said on {day_text(said)})"
        out = re.sub(r"(?<![\w-])" + re.escape(phrase) + r"(?![\w-])", lambda _m, n=note: n, out, count=1)
    return out


_FILLER = re.compile(r"\b(?:on|in|at|of|the|about|around|it was|was)\b|[\W_]+", re.IGNORECASE)


def only_the_day(answer: str, said: date) -> bool:
    """Whether `answer` says nothing but the day `said` ("8 May 2023", "On May 8, 2023", "2023-05-08"):
    what a small model answers when it copies the message's date instead of the time the message
    gives ("yesterday")."""
    text = answer.lower()
    month, short = f"{said:%B}".lower(), f"{said:%b}".lower()
    forms = [said.isoformat()] + [
        f.format(d=said.day, m=m) for m in (month, short) for f in ("{d} {m}", "{m} {d}", "{d}th {m}", "{m} {d}th")
    ]
    if not any(f in text for f in forms):
        return False
    for f in forms:
        text = text.replace(f, " ")
    text = text.replace(str(said.year), " ")
    return not _FILLER.sub("", text)


def said_in(text: str, near: Iterable[str], said: date) -> tuple[str, str] | None:
    """The relative time phrase of `text` (a message said on `said`) that dates what the words `near`
    (the question's) are about: the phrase whose sentence shares most of those words; None when no
    phrase's sentence shares any ("I adopted a puppy! My sister came last week": not the puppy's
    date) or two share as many."""
    wanted = {w.lower() for w in near}
    found = resolve(text, said)
    if not found:
        return None
    sentences = SENTENCE_BREAK.split(text)

    def shared(phrase: str) -> int:
        holding = [x for x in sentences if phrase.lower() in x.lower()]
        return max((len(wanted & set(words(x))) for x in holding), default=0)

    scored = sorted(((shared(p), i) for i, (p, _) in enumerate(found)), key=lambda x: (-x[0], x[1]))
    if scored[0][0] == 0 or (len(scored) > 1 and scored[0][0] == scored[1][0]):
        return None
    return found[scored[0][1]]
