"""Split a document into chunks of about `size` characters at the most natural boundary available.

Boundaries, best first: a blank line (paragraph), a newline, a sentence end ("." / "?" / "!"
followed by whitespace), any whitespace, and as a last resort a hard cut. Within one rank a
boundary just before a Markdown heading ("# ..." at the start of a line) is preferred, otherwise
the latest one (so chunks come out as close to `size` as the text allows, and at least half of it).

Every chunk's text is exactly ``doc.text[span.start:span.end]``: whitespace at either end is left
out of the span rather than stripped from a copy. Line numbers are 1-based and counted by "\\n",
which ingest makes the only newline in `Document.text`.
"""

from __future__ import annotations

import re
from bisect import bisect_left

from knowtree.types import Chunk, Document, Span

MIN_SIZE = 200
_TINY_TAIL = 0.25  # a last chunk shorter than this share of `size` is balanced with the one before
_LOOKAHEAD = 64  # characters scanned past a window so a boundary straddling its end is still seen

_PARAGRAPH = re.compile(r"\n(?:[ \t]*\n)+")
_NEWLINE = re.compile(r"\n")
_SENTENCE = re.compile(r"[.?!](?=\s)")
_SPACE = re.compile(r"\s+")
_NON_SPACE = re.compile(r"\S")
_HEADING = re.compile(r"[ ]{0,3}#{1,6}(?:[ \t]|$)", re.MULTILINE)

# (pattern, cut at the match's start (True) or end (False), may precede a heading)
_RANKS: tuple[tuple[re.Pattern[str], bool, bool], ...] = (
    (_PARAGRAPH, True, True),
    (_NEWLINE, True, True),
    (_SENTENCE, False, False),
    (_SPACE, True, False),
)


def chunk_document(doc: Document, *, size: int = 5000, overlap: int = 0) -> list[Chunk]:
    """Chunks of at most `size` characters covering every non-whitespace character of `doc`.

    With `overlap` > 0 each chunk after the first also repeats up to `overlap` characters of the
    text before it (starting at a word boundary); chunks still never exceed `size`.
    Raises ValueError for `size` < 200 or `overlap` outside 0 ≤ overlap < size/2.
    """
    if size < MIN_SIZE:
        raise ValueError(f"chunk size must be at least {MIN_SIZE} characters, got {size}")
    if overlap < 0 or 2 * overlap >= size:
        raise ValueError(
            f"overlap must be at least 0 and less than half the chunk size ({size}), got {overlap}"
        )

    text = doc.text
    budget = size - overlap  # new text per chunk, so that the overlap prefix still fits in `size`
    segments = _segments(text, budget, tiny=size * _TINY_TAIL)
    newlines = [m.start() for m in _NEWLINE.finditer(text)]

    chunks: list[Chunk] = []
    for index, (start, end) in enumerate(segments):
        if overlap and index > 0:
            # never reach back to the previous chunk's own start: each chunk must add something new
            start = _overlap_start(text, start, floor=segments[index - 1][0] + 1, overlap=overlap)
        span = Span(
            file=doc.path,
            start=start,
            end=end,
            line_start=bisect_left(newlines, start) + 1,
            line_end=bisect_left(newlines, end - 1) + 1,
        )
        chunks.append(Chunk(doc_path=doc.path, index=index, text=text[start:end], span=span))
    return chunks


def _segments(text: str, budget: int, *, tiny: float) -> list[tuple[int, int]]:
    """Non-overlapping (start, end) ranges, trimmed of whitespace, each at most `budget` long."""
    n = _trim_end(text, 0, len(text))
    pos = _skip_space(text, 0, n)
    segments: list[tuple[int, int]] = []
    while pos < n:
        if n - pos <= budget:
            segments.append((pos, n))
            break
        cut = _best_cut(text, pos + budget // 2, pos + budget)
        if cut is None:
            cut = pos + budget  # no boundary anywhere in the window: hard cut
        segments.append((pos, _trim_end(text, pos, cut)))
        pos = _skip_space(text, cut, n)

    if len(segments) >= 2 and segments[-1][1] - segments[-1][0] < tiny:
        segments[-2:] = _balance(text, segments[-2][0], segments[-1][1], budget, segments[-2:])
    return segments


def _balance(
    text: str, start: int, end: int, budget: int, current: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Re-split text[start:end] (the last two segments) near its middle; keep `current` if no better."""
    lo = max(start + 1, end - budget)  # both halves must fit in the budget
    hi = min(start + budget, end - 1)
    if lo > hi:
        return current
    middle = (start + end) // 2
    quarter = (end - start) // 4
    zone_lo, zone_hi = max(lo, middle - quarter), min(hi, middle + quarter)
    if zone_lo > zone_hi:
        return current
    cut = _best_cut(text, zone_lo, zone_hi, target=middle)
    if cut is None:
        cut = min(max(middle, lo), hi)
    first = (start, _trim_end(text, start, cut))
    second = (_skip_space(text, cut, end), end)
    shortest = min(first[1] - first[0], second[1] - second[0])
    if first[1] <= first[0] or second[1] <= second[0] or shortest <= current[-1][1] - current[-1][0]:
        return current
    return [first, second]


def _best_cut(text: str, lo: int, hi: int, *, target: int | None = None) -> int | None:
    """The best boundary `cut` with lo <= cut <= hi, or None when there is none.

    A segment ends at `cut` (exclusive) and the next one starts after the whitespace there.
    Among boundaries of the best rank, those before a heading win; of those the latest one
    (no `target`) or the one nearest to `target`.
    """
    scan_end = min(len(text), hi + _LOOKAHEAD)
    for pattern, at_start, heading_aware in _RANKS:
        found: list[tuple[int, bool]] = []
        for m in pattern.finditer(text, max(lo - 1, 0), scan_end):
            cut = m.start() if at_start else m.end()
            if cut < lo:
                continue
            if cut > hi:
                break
            found.append((cut, heading_aware and _HEADING.match(text, m.end()) is not None))
        if not found:
            continue
        headed = [cut for cut, before_heading in found if before_heading]
        cuts = headed or [cut for cut, _ in found]
        if target is None:
            return max(cuts)
        return min(cuts, key=lambda c: (abs(c - target), c))
    return None


def _overlap_start(text: str, start: int, *, floor: int, overlap: int) -> int:
    """Where a chunk starting at `start` begins once `overlap` characters before it are added."""
    begin = max(floor, start - overlap)
    if begin > 0 and not text[begin - 1].isspace() and not text[begin].isspace():
        m = _SPACE.search(text, begin, start)  # mid-word: move forward to the next word
        if m is None:
            return start
        begin = m.end()
    return _skip_space(text, begin, start)


def _skip_space(text: str, pos: int, limit: int) -> int:
    m = _NON_SPACE.search(text, pos, limit)
    return m.start() if m else limit


def _trim_end(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end
