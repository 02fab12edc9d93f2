"""Tests for knowtree.ingest.chunk: boundaries, invariants, overlap, line numbers."""

from __future__ import annotations

import hashlib
import itertools
import random

import pytest

from knowtree.ingest.chunk import chunk_document
from knowtree.types import Chunk, Document

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "ünï", "日本"]


def make_doc(text: str, path: str = "notes/doc.md") -> Document:
    return Document(path=path, text=text, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())


def sentence(rng: random.Random, words: int | None = None) -> str:
    n = words if words is not None else rng.randint(3, 25)
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + rng.choice([".", ".", "?", "!"])


def paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(sentence(rng) for _ in range(sentences))


def check_invariants(doc: Document, chunks: list[Chunk], size: int, overlap: int) -> None:
    text = doc.text
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert c.doc_path == doc.path and c.span.file == doc.path
        assert c.text == text[c.span.start : c.span.end]
        assert 0 < len(c.text) <= size
        assert c.text == c.text.strip()
        assert c.span.line_start == text.count("\n", 0, c.span.start) + 1
        assert c.span.line_end == text.count("\n", 0, c.span.end - 1) + 1
    starts = [c.span.start for c in chunks]
    ends = [c.span.end for c in chunks]
    assert starts == sorted(set(starts)) and ends == sorted(set(ends))
    if overlap == 0:
        assert all(ends[i] <= starts[i + 1] for i in range(len(chunks) - 1))
    # coverage: every non-whitespace character is in some chunk
    covered = bytearray(len(text))
    for c in chunks:
        covered[c.span.start : c.span.end] = b"\x01" * (c.span.end - c.span.start)
    assert all(covered[i] or ch.isspace() for i, ch in enumerate(text))


def random_document(rng: random.Random) -> str:
    parts: list[str] = []
    if rng.random() < 0.3:
        parts.append(rng.choice(["\n\n", "   ", "\n \t\n"]))
    for _ in range(rng.randint(1, 40)):
        kind = rng.random()
        if kind < 0.15:
            parts.append(f"{'#' * rng.randint(1, 3)} {sentence(rng, 3)}\n\n")
        elif kind < 0.25:
            parts.append("\n".join(f"- {sentence(rng)}" for _ in range(rng.randint(1, 8))) + "\n\n")
        elif kind < 0.3:
            parts.append("".join(rng.choice("abcdef0123") for _ in range(rng.randint(50, 900))) + "\n")
        elif kind < 0.35:
            parts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(50, 300))) + " ")
        else:
            sep = rng.choice(["\n\n", "\n", " ", "\n\n\n", "  \n\n"])
            parts.append(paragraph(rng, rng.randint(1, 12)) + sep)
    if rng.random() < 0.3:
        parts.append(rng.choice(["\n\n", "   ", "\n"]))
    return "".join(parts)


def test_random_documents_keep_invariants() -> None:
    rng = random.Random(20240601)
    for _ in range(60):
        doc = make_doc(random_document(rng))
        size = rng.choice([200, 300, 500, 1000, 2000])
        overlap = rng.choice([0, 0, 0, rng.randint(1, (size - 1) // 2)])
        chunks = chunk_document(doc, size=size, overlap=overlap)
        check_invariants(doc, chunks, size, overlap)
        if overlap == 0 and len(chunks) >= 2:
            assert len(chunks[-1].text) >= size * 0.25


def test_empty_and_whitespace_documents_give_no_chunks() -> None:
    assert chunk_document(make_doc("")) == []
    assert chunk_document(make_doc(" \n\n\t \n")) == []


def test_short_document_is_one_trimmed_chunk() -> None:
    doc = make_doc("\n\n  Hello world.\nSecond line.  \n\n")
    (chunk,) = chunk_document(doc)
    assert chunk.text == "Hello world.\nSecond line."
    assert (chunk.span.start, chunk.span.end) == (4, 29)
    assert (chunk.span.line_start, chunk.span.line_end) == (3, 4)
    assert chunk.index == 0 and chunk.doc_path == "notes/doc.md"


def test_line_numbers_on_handcrafted_lines() -> None:
    lines = [f"line {i:02d} " + "word " * 8 for i in range(1, 41)]  # 1-based numbering in the text
    doc = make_doc("\n".join(lines) + "\n")
    chunks = chunk_document(doc, size=300)
    assert len(chunks) > 5
    for c in chunks:
        first, last = c.text.splitlines()[0], c.text.splitlines()[-1]
        assert first.startswith(f"line {c.span.line_start:02d} ")  # newline boundaries: whole lines
        assert last.startswith(f"line {c.span.line_end:02d} ")
    assert chunks[0].span.line_start == 1 and chunks[-1].span.line_end == 40


def test_prefers_paragraph_boundaries() -> None:
    rng = random.Random(1)
    paragraphs = [paragraph(rng, 3) for _ in range(30)]
    doc = make_doc("\n\n".join(paragraphs))
    chunks = chunk_document(doc, size=1000)
    assert len(chunks) > 3
    check_invariants(doc, chunks, 1000, 0)
    for c in chunks:
        assert c.span.end == len(doc.text) or doc.text[c.span.end : c.span.end + 2] == "\n\n"
        assert c.span.start == 0 or doc.text[c.span.start - 2 : c.span.start] == "\n\n"


def test_prefers_newline_then_sentence_then_whitespace() -> None:
    rng = random.Random(2)
    lines = "\n".join(sentence(rng, 12) for _ in range(60))
    for c in chunk_document(make_doc(lines), size=500)[:-1]:
        assert lines[c.span.end] == "\n"

    one_line = " ".join(sentence(rng, 12) for _ in range(60))
    for c in chunk_document(make_doc(one_line), size=500)[:-1]:
        assert c.text[-1] in ".?!"

    no_punctuation = " ".join(rng.choice(WORDS) for _ in range(800))
    for c in chunk_document(make_doc(no_punctuation), size=500)[:-1]:
        assert no_punctuation[c.span.end] == " "


def test_hard_cut_without_any_boundary() -> None:
    blob = "x" * 1000
    chunks = chunk_document(make_doc(blob), size=300)
    assert all(len(c.text) <= 300 for c in chunks)
    assert "".join(c.text for c in chunks) == blob
    assert min(len(c.text) for c in chunks) >= 75


def test_prefers_boundary_before_heading() -> None:
    rng = random.Random(3)
    intro = paragraph(rng, 1)
    while len(intro) < 560:
        intro += " " + sentence(rng)
    intro = intro[:560].rstrip()
    filler = "\n\n".join(paragraph(rng, 1)[:150] for _ in range(6))
    text = intro + "\n\n# Heading\n\n" + filler
    chunks = chunk_document(make_doc(text), size=1000)
    assert chunks[0].text == intro
    assert chunks[1].text.startswith("# Heading")


def test_no_tiny_tail() -> None:
    rng = random.Random(4)
    text = rng.choice(WORDS)
    while len(text) < 1100:
        text += " " + rng.choice(WORDS)
    chunks = chunk_document(make_doc(text), size=1000)
    assert len(chunks) == 2
    assert all(250 <= len(c.text) <= 1000 for c in chunks)
    assert abs(len(chunks[0].text) - len(chunks[1].text)) < 200  # split near the middle


def test_overlap() -> None:
    rng = random.Random(5)
    text = "\n\n".join(paragraph(rng, 4) for _ in range(20))
    doc = make_doc(text)
    chunks = chunk_document(doc, size=1000, overlap=100)
    plain = chunk_document(doc, size=1000, overlap=0)
    check_invariants(doc, chunks, 1000, 100)
    assert len(chunks) > 3
    for prev, cur in itertools.pairwise(chunks):
        shared = prev.span.end - cur.span.start
        assert 0 < shared <= 100  # repeats the end of the previous chunk
        assert text[cur.span.start - 1].isspace()  # starts on a word boundary
    assert len(plain) <= len(chunks)


def test_overlap_never_cuts_a_word_or_exceeds_size() -> None:
    text = " ".join(["supercalifragilistic"] * 300)
    doc = make_doc(text)
    chunks = chunk_document(doc, size=400, overlap=150)
    check_invariants(doc, chunks, 400, 150)
    for c in chunks:
        assert c.text.split(" ")[0] == "supercalifragilistic"
        assert c.text.split(" ")[-1] == "supercalifragilistic"


def test_large_document_is_fast_enough() -> None:
    rng = random.Random(6)
    text = "\n\n".join(paragraph(rng, 5) for _ in range(3000))  # about 1.5 MB
    chunks = chunk_document(make_doc(text), size=5000)
    assert chunks[-1].span.end == len(text.rstrip())
    assert all(len(c.text) <= 5000 for c in chunks)


@pytest.mark.parametrize(
    ("size", "overlap"),
    [(199, 0), (0, 0), (-5, 0), (400, -1), (400, 200), (400, 300), (1000, 500)],
)
def test_invalid_parameters(size: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_document(make_doc("some text"), size=size, overlap=overlap)


def test_boundary_parameters_are_accepted() -> None:
    doc = make_doc("word " * 200)
    check_invariants(doc, chunk_document(doc, size=200, overlap=99), 200, 99)
