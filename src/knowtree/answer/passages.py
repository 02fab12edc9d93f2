"""Long messages, read losslessly: every message is indexed, scored, read and cited in passages.

A message of up to `SINGLE_CHARS` characters is one passage. A longer one (a pasted document, a code
block, a long story) is cut into consecutive passages of about `PASSAGE_CHARS` characters, at a
paragraph, line, sentence or word boundary near the target, that together cover every character:
nothing is dropped and nothing is clipped. Offsets are into the message's content (what the user
wrote, without the "Speaker: " prefix), so a citation can say where in the message its passage is.

Search ranks passages (`knowtree.answer.hybrid`); the token budget is filled with passages, not
whole messages, so a fact at character 600 of a message, or anywhere in a 16k-character document,
can be found and read without the rest of the message crowding everything else out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from knowtree.answer.evidence import lexical_score
from knowtree.text import SENTENCE_BREAK, clip, human_time
from knowtree.types import Node

#: a message this long or shorter is one passage
SINGLE_CHARS = 800
#: the target length of each passage of a longer message
PASSAGE_CHARS = 600

_BREAKS = (re.compile(r"\n\s*\n"), re.compile(r"\n"), re.compile(r"(?<=[.!?;])\s+"), re.compile(r"\s+"))


def approx_tokens(text: str) -> int:
    """Tokens ≈ characters / 4, rounded up (the same rule the benchmark applies to every method)."""
    return math.ceil(len(text) / 4)


def split_spans(text: str, target: int = PASSAGE_CHARS, single: int = SINGLE_CHARS) -> list[tuple[int, int]]:
    """[start, end) character spans covering `text` exactly, in order: one span for a short text,
    else spans of about `target` characters ending at the strongest boundary between 2/3 and 4/3 of
    the target (a paragraph, then a line, a sentence, a space; a hard cut only inside a long word)."""
    n = len(text)
    if n <= single:
        return [(0, n)]
    spans: list[tuple[int, int]] = []
    start = 0
    while start < n:
        if n - start <= target * 4 // 3:
            spans.append((start, n))
            break
        lo, hi = start + target * 2 // 3, min(n, start + target * 4 // 3)
        cut = None
        for pattern in _BREAKS:
            ends = [m.end() for m in pattern.finditer(text, lo, hi)]
            if ends:
                cut = min(ends, key=lambda e: abs(e - (start + target)))
                break
        spans.append((start, cut or start + target))
        start = cut or start + target
    return spans


@dataclass(frozen=True)
class Piece:
    """One passage of a message leaf: `start`/`end` are offsets into the message's content."""

    leaf: str
    start: int
    end: int
    text: str  # the content between start and end, verbatim
    total: int  # the content's length
    index: int = 0  # 0-based, in the message

    @property
    def id(self) -> str:
        return f"{self.leaf}@{self.start}"

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.end == self.total


def speaker_and_content(node: Node) -> tuple[str, str]:
    """A message leaf's text is "Speaker: content[ [shares ...]]": (speaker, the rest)."""
    speaker, _, content = node.text.partition(": ")
    return speaker, content


def pieces_of(node: Node) -> list[Piece]:
    """The passages of a message leaf, in order, covering its content exactly."""
    _, content = speaker_and_content(node)
    spans = split_spans(content)
    return [Piece(node.id, a, b, content[a:b], len(content), i) for i, (a, b) in enumerate(spans)]


class Passages:
    """The passages of every message leaf of a memory, computed once per navigator."""

    def __init__(self, nodes: dict[str, Node]) -> None:
        self.nodes = nodes
        self.by_leaf: dict[str, list[Piece]] = {}
        self.by_id: dict[str, Piece] = {}
        for node in nodes.values():
            if node.is_leaf:
                ps = pieces_of(node)
                self.by_leaf[node.id] = ps
                for p in ps:
                    self.by_id[p.id] = p

    def of(self, leaf: str) -> list[Piece]:
        return self.by_leaf.get(leaf, [])

    def tokens(self, piece: Piece) -> int:
        """A passage's cost: its words plus, for a message's first passage, the speaker's name."""
        speaker, _ = speaker_and_content(self.nodes[piece.leaf])
        return approx_tokens(piece.text) + (approx_tokens(speaker + ": ") if piece.index == 0 else 0)

    def line(self, piece: Piece, limit: int | None = None) -> str:
        """How a passage is shown to the model: "[12] Ann (8 May 2023): words", with the character
        range when the message is longer than this passage ("[12] Ann (8 May 2023, characters
        600-1,200 of 4,000): words"). `limit` clips for a short preview; reading never clips."""
        node = self.nodes[piece.leaf]
        pos = node.spans[0].line_start if node.spans else 0
        when = human_time(node.meta.time_range[0]).split(",")[0] if node.meta.time_range else "undated"
        speaker, _ = speaker_and_content(node)
        where = "" if piece.whole else f", characters {piece.start:,}-{piece.end:,} of {piece.total:,}"
        words = " ".join(piece.text.split())
        if limit is not None:
            words = clip(words, limit)
        return f"[{pos}] {speaker} ({when}{where}): {words}"

    def best(self, leaf: str, answer: str, question: str = "", among: list[Piece] | None = None) -> Piece:
        """The passage of `leaf` (among those read, when given) that holds most of the answer's words,
        then the question's; the first one when none does."""
        candidates = among or self.of(leaf)
        return max(
            candidates,
            key=lambda p: (lexical_score(answer, p.text), lexical_score(question, p.text), -p.index),
        )


def quote_of(piece: Piece, answer: str, question: str = "", limit: int = 300) -> str:
    """The words of a passage to quote: all of it when short, else the sentence that holds most of
    the answer's words (then the question's), clipped to `limit`."""
    text = " ".join(piece.text.split())
    if len(text) <= limit:
        return text
    sentences = [s for s in SENTENCE_BREAK.split(piece.text) if s.strip()]
    best = max(
        sentences,
        key=lambda s: (lexical_score(answer, s), lexical_score(question, s)),
        default=text,
    )
    return clip(best, limit)


def fill(
    passages: Passages,
    tree_leaves: list[str],
    scores: dict[str, float],
    budget: int,
    *,
    hybrid: bool = True,
) -> tuple[dict[str, list[Piece]], dict[str, str]]:
    """Fill `budget` tokens with passages: first the reached topic's messages (each whole if it fits,
    else its best-scoring passages), then the memory's best-scoring passages anywhere.

    `scores` maps passage ids to fused search scores. Returns (leaf → its passages read, in message
    order; leaf → "tree" | "hybrid"), leaves in the order they were taken."""
    taken: dict[str, list[Piece]] = {}
    origin: dict[str, str] = {}
    used = 0

    def take(piece: Piece, via: str) -> bool:
        nonlocal used
        cost = passages.tokens(piece)
        if used + cost > budget:
            return False
        taken.setdefault(piece.leaf, []).append(piece)
        origin.setdefault(piece.leaf, via)
        used += cost
        return True

    for leaf in tree_leaves:
        ps = passages.of(leaf)
        if sum(passages.tokens(p) for p in ps) + used <= budget:
            for p in ps:
                take(p, "tree")
            continue
        # too long to read whole: its best passages that fit (in search order), then stop the topic
        for p in sorted(ps, key=lambda p: (-scores.get(p.id, 0.0), p.index)):
            take(p, "tree")
        break
    if hybrid:
        ranked = sorted((pid for pid in scores if pid in passages.by_id), key=lambda i: -scores[i])
        for pid in ranked:
            piece = passages.by_id[pid]
            if piece in taken.get(piece.leaf, []):
                continue
            if not take(piece, "hybrid"):
                break  # read in rank order until the next passage does not fit (as benchmarks do)
    for leaf in taken:
        taken[leaf].sort(key=lambda p: p.start)
    return taken, origin


def covered(pieces: Sequence[Piece], text: str, probe_chars: int = 60) -> list[Piece]:
    """The passages of a long message that a retrieved text (index pieces, cut at other boundaries
    than passages, possibly with neighbouring messages) overlaps: the passages from the first to the
    last that holds the start of one of its lines or sentences (of at least 20 characters, compared
    whitespace-normalized) found in no other passage. The retrieved text is one stretch of the
    message, so a line it shares with many passages (a repeated code line, a log line) places nothing;
    empty when no line places it (the caller then picks the passage sharing most words)."""
    probes = [" ".join(s.split())[:probe_chars] for s in SENTENCE_BREAK.split(text) if len(s.strip()) >= 20]
    texts = [" ".join(p.text.split()) for p in pieces]
    placed = set()
    for probe in probes:
        holding = [i for i, t in enumerate(texts) if probe in t]
        if len(holding) == 1:
            placed.add(holding[0])
    return list(pieces[min(placed) : max(placed) + 1]) if placed else []


def spans_read(node: Node, texts: Sequence[str]) -> list[Piece]:
    """The stretches of a message leaf's content that index pieces (`texts`: verbatim slices of the
    leaf's text, "Speaker: " included in the first) cover, as pieces; [] when one is not found."""
    _, content = speaker_and_content(node)
    skip = len(node.text) - len(content)  # "Speaker: "
    out: list[Piece] = []
    for text in texts:
        at = node.text.find(text) if text else -1
        if at < 0:
            return []
        start, end = max(0, at - skip), min(len(content), at + len(text) - skip)
        if end > start:
            out.append(Piece(node.id, start, end, content[start:end], len(content), 0 if start == 0 else 1))
    return out


def merged(pieces: Sequence[Piece]) -> list[Piece]:
    """Pieces of one message in order, overlapping or touching ones joined (a passage and a span read
    twice are read once)."""
    out: list[Piece] = []
    for p in pieces:
        last = out[-1] if out else None
        if last is not None and p.start <= last.end:
            if p.end > last.end:
                rest = p.text[last.end - p.start :]
                out[-1] = Piece(last.leaf, last.start, p.end, last.text + rest, last.total, last.index)
            continue
        out.append(p)
    return out
