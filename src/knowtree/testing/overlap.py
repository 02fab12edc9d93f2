"""Word-overlap helpers the `KeywordModel`'s roles share: words, sentences, the text between markers."""

from __future__ import annotations

import re

from knowtree.text import SENTENCE_BREAK, STOPWORDS

WORD = re.compile(r"[A-Za-z]+|\d+")


def words(text: str, min_len: int = 2) -> set[str]:
    """The text's words of `min_len` letters or more, stopwords left out, cut to 6 letters (a poor stem)."""
    return {w.lower()[:6] for w in WORD.findall(text) if w.lower() not in STOPWORDS and len(w) >= min_len}


def sentences(text: str) -> list[str]:
    return [s.strip() for s in SENTENCE_BREAK.split(text) if len(s.strip()) > 3]


def between(text: str, start: str, end: str) -> str:
    """The text between the first `start` and the next `end` ("" when either is missing)."""
    i = text.find(start)
    j = text.find(end, i + len(start))
    return text[i + len(start) : j] if i >= 0 and j >= 0 else ""


def question_line(prompt: str) -> str:
    """The rest of the prompt's first line starting "Question: "."""
    m = re.search(r"^Question: (.*)$", prompt, flags=re.M)
    return m.group(1) if m else ""
