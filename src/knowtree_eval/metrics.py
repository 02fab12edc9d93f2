"""Metrics, as plain functions on plain values, so they can be checked by hand and reused anywhere.

Answer quality: SQuAD's exact match and token F1 (same normalisation as the official script, so
numbers compare with published ones), and multiple-choice accuracy from a letter extracted out of a
free-text reply. Retrieval: hit rate@k (any gold passage in the top k), evidence recall@k (share of
the gold passages in the top k), and recall at a token budget, which compares methods that read
passages of different sizes fairly: what share of the evidence fits in the first N tokens read.

A metric that does not apply (no gold evidence, no gold answer) is `None`, never 0: a dataset
without evidence ids must not report a 0% hit rate.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence

Tokenizer = Callable[[str], int]

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


# -- answers -----------------------------------------------------------------------------------------


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation, drop articles, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(gold: str | Iterable[str]) -> list[str]:
    return [gold] if isinstance(gold, str) else list(gold)


def exact_match(prediction: str | None, gold: str | Iterable[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer (the best of several)."""
    if prediction is None:
        return 0.0
    p = normalize_answer(prediction)
    return max((float(p == normalize_answer(g)) for g in _golds(gold)), default=0.0)


def token_f1(prediction: str | None, gold: str | Iterable[str]) -> float:
    """SQuAD token F1 between the prediction and the best-matching gold answer."""
    if prediction is None:
        return 0.0
    return max((_f1(prediction, g) for g in _golds(gold)), default=0.0)


def _f1(prediction: str, gold: str) -> float:
    p = normalize_answer(prediction).split()
    g = normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision = same / len(p)
    recall = same / len(g)
    return 2 * precision * recall / (precision + recall)


# -- multiple choice ---------------------------------------------------------------------------------


def extract_choice(reply: str | None, options: Sequence[str] | None = None) -> str | None:
    """The option letter a free-text reply picks, or None when it picks none or several.

    Tried in order: a leading letter ("B", "(B) …", "B. …", "B: …"); "answer/option/choice (is) B";
    a single distinct "(B)" anywhere; and, with `options`, a reply that is (or contains) exactly one
    option's text. A leading "A" followed by a space is an article, not a choice.
    """
    if not reply:
        return None
    n = len(options) if options else 4
    letters = "".join(chr(65 + i) for i in range(max(1, min(n, 26))))
    cls = f"[{letters}]"
    text = reply.strip()
    m = re.match(rf"\(?({cls})(?:\)|[.:]|$)", text)
    if m:
        return m.group(1)
    m = re.search(rf"\b(?:answer|option|choice)\s*(?:is|:)?\s*\(?({cls})\b\)?", text, re.IGNORECASE)
    if m:
        return m.group(1).upper()
    found = set(re.findall(rf"\(({cls})\)", text))
    if len(found) == 1:
        return found.pop()
    if options:
        norm = normalize_answer(text)
        equal = [i for i, o in enumerate(options) if normalize_answer(o) == norm]
        if len(equal) == 1:
            return letters[equal[0]]
        within = [i for i, o in enumerate(options) if normalize_answer(o) and normalize_answer(o) in norm]
        if len(within) == 1:
            return letters[within[0]]
    return None


def choice_correct(reply: str | None, gold_letter: str, options: Sequence[str] | None = None) -> bool:
    return extract_choice(reply, options) == gold_letter.strip().strip("()").upper()


def accuracy(correct: Iterable[bool | float | None]) -> float | None:
    """Share of correct answers, over the questions where correctness applies."""
    return mean(None if c is None else float(c) for c in correct)


# -- retrieval ---------------------------------------------------------------------------------------


def hit_at_k(ranked: Sequence[str], gold: Collection[str], k: int) -> float | None:
    """1.0 when any gold id is among the first k ranked ids; None without gold."""
    if not gold:
        return None
    g = set(gold)
    return float(any(r in g for r in ranked[: max(k, 0)]))


def recall_at_k(ranked: Sequence[str], gold: Collection[str], k: int) -> float | None:
    """Share of the distinct gold ids found among the first k ranked ids; None without gold."""
    if not gold:
        return None
    g = set(gold)
    return len(g & set(ranked[: max(k, 0)])) / len(g)


def approx_tokens(text: str) -> int:
    """Tokens ≈ characters / 4 (rounded up): the usual rule of thumb for English with BPE tokenizers."""
    return math.ceil(len(text) / 4)


def count_tokens(text: str, tokenizer: Tokenizer | None = None) -> int:
    return tokenizer(text) if tokenizer is not None else approx_tokens(text)


def within_budget(lengths: Iterable[int], budget: int) -> int:
    """How many leading items fit, whole, in `budget` tokens when read in rank order.

    Reading stops at the first item that does not fit (a reader goes down the ranking; it does not
    skip a long passage to squeeze in a later short one), so no method gets more than `budget` tokens.
    """
    used = 0
    count = 0
    for n in lengths:
        if used + n > budget:
            break
        used += n
        count += 1
    return count


def recall_at_budget(
    ranked: Sequence[str],
    texts: Sequence[str],
    gold: Collection[str],
    budget: int,
    tokenizer: Tokenizer | None = None,
) -> float | None:
    """Evidence recall over the ranked passages that fit, whole and in order, in `budget` tokens."""
    if not gold:
        return None
    n = within_budget((count_tokens(t, tokenizer) for t in texts), budget)
    return recall_at_k(ranked, gold, n)


def mean(values: Iterable[float | int | None]) -> float | None:
    """Mean of the values that are not None; None when none are."""
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None
