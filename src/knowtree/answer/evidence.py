"""Checking a model's claim against the text it read, without asking the model.

Small models rarely admit that a text answers only part of a question: they fill the gap with
something plausible (stack.md, pitfall 4). So a part counts as answered only when the model's quote is
really in the text and the answer's new words (those not already in the question) are found there too.
"""

from __future__ import annotations

import re

from knowtree.text import QUOTE_MATCH, STOPWORDS, WORD, quote_match, quote_score, stem, words


def content_words(text: str) -> list[str]:
    return [w for w in words(text) if w not in STOPWORDS and (len(w) > 2 or w.isdigit())]


def grounded_share(answer: str, question: str, text: str) -> float:
    """Share of the answer's new content words (not in the question) that the text contains."""
    asked = {stem(w) for w in content_words(question)}
    new = [stem(w) for w in content_words(answer) if stem(w) not in asked]
    if not new:
        return 1.0
    present = {stem(w) for w in content_words(text)}
    return sum(1 for w in new if w in present) / len(new)


# multiple-choice options, on their own lines ("A. ...", "(B) ...") or inline ("... (A) x (B) y")
_OPTIONS_START = re.compile(r"(?:^|\s)\(?[A-D][).:]\s|\([A-D]\)", re.MULTILINE)


def is_multiple_choice(question: str) -> bool:
    return len({m.group(0).strip(" (.:)") for m in _OPTIONS_START.finditer(question)}) >= 2


_PERSON_Q = re.compile(
    r"\b(who|whom|whose)\b|\bwhich (person|people|member|engineer|employee|manager|company|organi[sz]ation|firm"
    r"|vendor|supplier|country|city)\b",
    re.I,
)
# replies that say there is no answer, whatever the found flag says
_REFUSAL = re.compile(
    r"\b(does not|doesn't|do not|did not|cannot|can't|can not) (answer|say|mention|specify|state|provide|"
    r"contain|include|be determined|be found|know)|\bnot (mentioned|specified|stated|provided|given|found|"
    r"available|known|answered)\b|\bno (information|answer|mention|details?)\b|^\s*(unknown|none|n/?a|"
    r"not applicable)\W*$",
    re.I,
)
_TIME_Q = re.compile(
    r"\bwhen\b|\bwhat (date|day|time|year|month|week)\b|\bwhich (date|day|year|month|week)\b|\bhow long ago\b",
    re.I,
)
_NUMBER_Q = re.compile(
    r"\bhow (many|much|long|often|old|far|big|large)\b|\bwhat (percentage|percent|number|share|amount|proportion)\b",
    re.I,
)
_MONTHS = (
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday saturday sunday "
    "today yesterday tomorrow morning evening night week weekend month year quarter spring summer autumn fall "
    "winter ago later earlier before after since during"
).split()
_NUMBER_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve dozen hundred thousand million billion "
    "half quarter once twice several few many none all"
).split()
_ROLES = (
    "team lead manager engineer director officer president founder owner author agent customer user client "
    "staff employee member group committee department company board mother father brother sister friend wife "
    "husband son daughter captain doctor teacher"
).split()


def question_core(question: str) -> str:
    """The question without multiple-choice options (they are candidates, not what is asked)."""
    if not is_multiple_choice(question):
        return question
    m = _OPTIONS_START.search(question)
    return question[: m.start()] if m else question


def fits_question(question: str, answer: str) -> tuple[bool, str]:
    """Whether the answer is of the kind asked for: a who-question needs someone, a when a time..."""
    core = question_core(question)
    asked = {stem(w) for w in content_words(core)}
    raw_words = WORD.findall(answer)
    lowered = [w.lower() for w in raw_words]
    if _PERSON_Q.search(core):
        names = [
            w
            for w in raw_words
            if w[0].isupper() and w.lower() not in STOPWORDS and stem(w.lower()) not in asked
        ]
        roles = [w for w in lowered if w in _ROLES or w.rstrip("s") in _ROLES]
        if not names and not roles:
            return False, "a who-question, but the answer names nobody"
    elif _TIME_Q.search(core):
        if not any(w.isdigit() or w in _MONTHS for w in lowered):
            return False, "a when-question, but the answer gives no time"
    elif _NUMBER_Q.search(core) and not any(w.isdigit() or w in _NUMBER_WORDS for w in lowered):
        return False, "a how-many/much question, but the answer gives no quantity"
    return True, "fits"


def placed(quote: str, text: str) -> tuple[int, int] | None:
    """Where a quote is in the text: verbatim (`locate`), else where it matches best when that match
    would accept it (`text.quote_match` ≥ `QUOTE_MATCH`: a small model drops a word or adds a list
    dash); None when it is not there."""
    where = locate(quote, text)
    if where is None and quote.strip():
        score, near = quote_match(quote, text)
        where = near if score >= QUOTE_MATCH else None
    return where


def relevant_context(question: str, quote: str, text: str, *, radius: int = 300) -> float:
    """Share of the question's words found in the text around the quote (0 when it is not located)."""
    asked = {stem(w) for w in content_words(question_core(question))}
    if not asked:
        return 1.0
    where = placed(quote, text)
    if where is None:
        window = quote
    else:
        window = text[max(0, where[0] - radius) : where[1] + radius]
    present = {stem(w) for w in content_words(window)}
    return len(asked & present) / len(asked)


def ids_not_before(question: str, quote: str, text: str, *, radius: int = 300) -> list[str]:
    """Numbers and ids the question names (a version, a ticket, a year) that neither the quote nor the
    text just before it mentions: a statement about release 7.1 does not answer a question about 7.2."""
    wanted = [w for w in words(question_core(question)) if any(ch.isdigit() for ch in w)]
    if not wanted:
        return []
    where = placed(quote, text)
    start = where[0] if where else 0
    before = set(words(text[max(0, start - radius) : start] + " " + quote))
    return [w for w in dict.fromkeys(wanted) if w not in before]


def supported(
    quote: str, answer: str, question: str, text: str, *, threshold: float = QUOTE_MATCH, whole_question: str = ""
) -> tuple[bool, str]:
    """Whether a claimed answer is backed by the text; the reason says why not.

    Four checks, none of which asks the model: the quote is in the text; the text around it is about
    the question; the answer's new words come from the text; the answer is of the kind asked for.
    """
    if not answer.strip():
        return False, "empty answer"
    if _REFUSAL.search(answer):
        return False, "the answer says the text does not answer it"
    score = quote_score(quote, text)
    if score < threshold:
        return False, f"quote not found in the text (match {score:.2f})"
    changed = sorted(numbers(quote) - numbers(text))
    if changed:  # a quote is accepted with a word dropped or a dash added, never with another number
        return False, f"the quote's {', '.join(changed)} is not in the text"
    # a part that refers back ("who will be its manager?") names its ids in the whole question
    refers_back = re.search(
        r"\b(it|its|they|their|them|this|that|these|those|he|she|his|her)\b", question, re.I
    )
    missing_ids = ids_not_before(f"{question} {whole_question}" if refers_back else question, quote, text)
    if missing_ids:
        return False, f"the quote is not about {', '.join(missing_ids)}"
    context = relevant_context(question, quote, text)
    if context < 0.4:
        return False, f"the quoted passage is not about the question ({context:.0%} of its words nearby)"
    share = grounded_share(answer, question, text)
    if share < 0.5:
        return False, f"answer not grounded in the text ({share:.0%} of its new words appear)"
    return fits_question(question, answer)


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def numbers(text: str) -> set[str]:
    """The numbers in a text, thousands separators dropped ("1,250.5" → "1250.5")."""
    return {re.sub(r",(?=\d{3}\b)", "", n) for n in _NUMBER.findall(text)}


def locate(quote: str, text: str) -> tuple[int, int] | None:
    """Character offsets of the quote in the text when it appears verbatim (modulo whitespace/case)."""
    pattern = r"\s+".join(re.escape(w) for w in quote.split())
    if not pattern:
        return None
    m = re.search(pattern, text, flags=re.IGNORECASE)
    return (m.start(), m.end()) if m else None


def lexical_score(question: str, text: str) -> float:
    """A crude relevance score for fallbacks: how many question words the text contains."""
    q = set(stem(w) for w in content_words(question))
    if not q:
        return 0.0
    t = set(stem(w) for w in content_words(text))
    return len(q & t) / len(q)


def option_letter(answer: str, question: str = "") -> str | None:
    """The option an answer picks: by its letter, else by the option text it repeats."""
    m = re.match(r"\s*\(?([A-D])(?:[).:]|\s*$)", answer) or re.search(
        r"\(([A-D])\)|\boption ([A-D])\b", answer
    )
    if m:
        return next((g for g in m.groups() if g), None)
    said = set(content_words(answer))
    best, score = None, 0.5
    for letter in "ABCD":
        option = set(content_words(option_text(question, letter)))
        if option and jaccard(said, option) > score:
            best, score = letter, jaccard(said, option)
    return best


def option_text(question: str, letter: str) -> str:
    """The text of option `letter` in a multiple-choice question ("" when it has none)."""
    m = re.search(rf"\(?\b{letter}[).:]\s*(.*?)(?=\s*\(?\b[A-D][).:]\s|\s*Answer with|$)", question, re.S)
    return " ".join(m.group(1).split()) if m else ""


def jaccard(a: set[str], b: set[str]) -> float:
    """Shared words over all words (1.0 for two empty sets)."""
    return len(a & b) / len(a | b) if a | b else 1.0
