"""Plain-text helpers every layer may use: words, stems, stop words, and display helpers.

Imports nothing from knowtree: it sits at the bottom of the layers, beside `types` and `errors`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from datetime import datetime

WORD = re.compile(r"[A-Za-z]+|\d+(?:[.,]\d+)*")
#: where a text splits into sentences and lines: after . ! ? and their spaces, and at line breaks
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "then",
        "than",
        "that",
        "this",
        "these",
        "those",
        "there",
        "here",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "without",
        "about",
        "into",
        "onto",
        "over",
        "under",
        "after",
        "before",
        "during",
        "while",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "done",
        "have",
        "has",
        "had",
        "having",
        "it",
        "its",
        "it's",
        "he",
        "she",
        "they",
        "them",
        "his",
        "her",
        "their",
        "theirs",
        "we",
        "us",
        "our",
        "you",
        "your",
        "i",
        "me",
        "my",
        "mine",
        "not",
        "no",
        "yes",
        "so",
        "as",
        "such",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "some",
        "each",
        "every",
        "other",
        "another",
        "more",
        "most",
        "much",
        "many",
        "few",
        "can",
        "could",
        "will",
        "would",
        "shall",
        "should",
        "may",
        "might",
        "must",
        "also",
        "just",
        "only",
        "very",
        "too",
        "up",
        "down",
        "out",
        "off",
        "again",
        "once",
        "both",
        "either",
        "neither",
        "nor",
        "own",
        "same",
        "s",
        "t",
        "don",
        "doesn",
        "didn",
        "isn",
        "wasn",
        "aren",
        "weren",
        "answer",
        "question",
        "text",
        "part",
        "option",
        "options",
        "letter",
        "right",
        "correct",
        "following",
        "according",
        "said",
        "says",
        "say",
    ]
)
# BM25 queries (retrieve/bm25.py, the tree index, lexical search in memories) drop a narrower,
# classic list of English function words: they keep words such as "may", "right", "part", "answer"
# or "option" that a question can be about, and drop the fragments the \w+ tokenizer makes of
# contractions ("ll", "ve", "couldn"). The retrieval numbers are measured with exactly this set.
QUERY_STOPWORDS: frozenset[str] = (
    STOPWORDS
    - frozenset(
        """
        according another answer correct done either every following it's letter many may might mine
        much must neither onto option options part question right said say says shall text us
        without yes
        """.split()
    )
) | frozenset(
    """
    above against because below between cannot couldn d doing ever further hadn hasn haven hers
    herself him himself itself let ll m myself now ought ours ourselves re shan shouldn
    themselves through until ve won wouldn y yours yourself yourselves
    """.split()
)


def words(text: str) -> list[str]:
    return [w.lower() for w in WORD.findall(text)]


def stem(word: str) -> str:
    return word[:5] if word.isalpha() else word.replace(",", "")


QUOTE_MATCH = 0.65  # the share of a quote's words, in one stretch, that counts as the quote being there


def quote_score(quote: str, text: str) -> float:
    """How much of the quote appears, in one stretch, in the text: 1.0 exact, 0.0 not at all."""
    return quote_match(quote, text)[0]


def quote_match(quote: str, text: str) -> tuple[float, tuple[int, int] | None]:
    """`quote_score` and where: the [start, end) characters of the stretch of the text, as many words
    long as the quote, that holds most of the quote's words (None when nothing matches)."""
    q = words(quote)
    if not q:
        return 0.0, None
    found = list(WORD.finditer(text))
    t = [w.group().lower() for w in found]
    m = len(q)
    if len(t) < m:
        return 0.0, None

    def span(i: int) -> tuple[int, int]:
        return found[i].start(), found[i + m - 1].end()

    for i in range(len(t) - m + 1):
        if t[i] == q[0] and t[i : i + m] == q:
            return 1.0, span(i)
    if m < 4:
        return 0.0, None  # a very short quote must match exactly
    need = Counter(q)
    window = Counter(t[:m])
    best, at = sum((need & window).values()), 0
    for i in range(m, len(t)):
        window[t[i]] += 1
        window[t[i - m]] -= 1
        if window[t[i - m]] == 0:
            del window[t[i - m]]
        got = sum((need & window).values())
        if got > best:
            best, at = got, i - m + 1
    return best / m, span(at) if best else None


def clip(text: str, limit: int, *, keep_space: bool = False) -> str:
    """`text` with its whitespace collapsed, cut to `limit` characters ending in "…". `keep_space`:
    a space the cut ends on stays before the "…" (the KB builder's prompts, cached by their text,
    were made that way)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    return (head if keep_space else head.rstrip()) + "…"


def human_time(iso: str | None) -> str:
    """ "8 May 2023, 1:56 pm" for an ISO time; midnight times show the date alone."""
    if not iso:
        return "undated"
    t = datetime.fromisoformat(iso)
    day = f"{t.day} {t:%B %Y}"
    if t.hour == 0 and t.minute == 0:
        return day
    hour = t.hour % 12 or 12
    return f"{day}, {hour}:{t.minute:02d} {'am' if t.hour < 12 else 'pm'}"


def human_range(times: Sequence[str]) -> str:
    if not times:
        return "undated"
    a, b = times[0][:10], times[-1][:10]
    first = human_time(times[0]).split(",")[0]
    return first if a == b else f"{first} – {human_time(times[-1]).split(',')[0]}"


def phrase_in(phrase: str, text: str) -> bool:
    """Whether `phrase` occurs in `text` as whole words (any case, any run of spaces between)."""
    pattern = r"(?<!\w)" + r"\s+".join(re.escape(w) for w in phrase.split()) + r"(?!\w)"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None
