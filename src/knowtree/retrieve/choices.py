"""Multiple-choice questions as search queries.

A question that lists its options ("Why did she leave?\\n(A) … (B) … (C) …") is searched once with the
whole text and once more per option (the question with that option), the rankings taken by turns
(`treesearch.fuse`). An option's content words are often the ones the passage that settles it uses,
and a single query mixing every option lets the longest option's words dominate the ranking. On
QuALITY (103 dev questions, the embedded reader, 1,536 tokens) this raised `nav` from 50 to 53 right
with two readings and from 54 to 55 with four (`benchmarks/RESULTS.md`).
"""

from __future__ import annotations

import re

# an option's letter: "(A)" anywhere after a space (a question typed on one line), or "A)" / "A." at
# the start of a line
_CHOICE = re.compile(r"(?:^|(?<=\s))\(([A-Z])\)[ \t]*|(?:^|(?<=\n))[ \t]*([A-Z])[.)][ \t]+", re.MULTILINE)


def split_choices(text: str, marks: re.Pattern[str] = _CHOICE) -> tuple[str, list[str]] | None:
    """Split "question\\n(A) x\\n(B) y…" (or "question (A) x (B) y", or lines "A) x" / "A. x") into the
    question and its options' texts, each on one line; None unless at least two options are lettered
    A, B, … in order (a stray "(A)" in a question is no choice, nor is a letter in an option).
    `marks`: another reading of an option's letter (its one non-empty group), e.g. a dataset's own."""
    found = list(marks.finditer(text))
    letters = [next((g for g in m.groups() if g), "") for m in found]
    if len(letters) < 2 or letters != [chr(65 + i) for i in range(len(letters))]:
        return None
    stem = text[: found[0].start()].strip()
    options = []
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        options.append(" ".join(text[m.end() : end].split()))
    return stem, options


def choice_queries(text: str) -> list[str]:
    """The extra queries of a multiple-choice question: the question with each option (none for any
    other question, or where an option is empty)."""
    split = split_choices(text)
    if split is None:
        return []
    stem, options = split
    return [f"{stem} {o}" for o in options] if all(options) else []
