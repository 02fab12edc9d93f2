"""What structure-aware ingestion produces: a document's text plus its sections (and pages).

Every structured loader (PDF, Markdown, DOCX, HTML) returns a `StructuredDocument`: the decoded
`Document` (its `text` is what spans point into), the flat list of `Section`s in reading order with
their heading levels, and for paged sources the character range of every physical page.
`build.structure` turns the flat list into a tree.
"""

from __future__ import annotations

import hashlib
import os
from bisect import bisect_right
from dataclasses import dataclass, field

from knowtree.ingest.formats import STRUCTURED_SUFFIXES
from knowtree.types import Document


@dataclass
class Section:
    title: str
    level: int  # 1 = top level
    start: int  # character offset of the heading in Document.text
    end: int = -1  # filled in by `close_sections`: where the next section at any level begins
    page_start: int | None = None  # physical pages, 1-based inclusive (paged sources)
    page_end: int | None = None
    body: int = -1  # where the text after the heading begins (-1: unknown, the line after `start`)


@dataclass
class StructuredDocument:
    document: Document
    sections: list[Section]
    # paged sources: (start, end) character range of each physical page in document.text
    pages: list[tuple[int, int]] | None = None
    # where the sections came from: outline, toc, llm, pages, headings
    source: str = "headings"
    # user-supplied metadata (company, year, ...), stored with the document
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return self.document.path

    def page_of(self, offset: int) -> int | None:
        """The 1-based physical page holding character `offset`, or None for unpaged text."""
        if not self.pages:
            return None
        starts = [s for s, _ in self.pages]
        return max(1, bisect_right(starts, offset))

    def page_text(self, page: int) -> str:
        assert self.pages is not None
        s, e = self.pages[page - 1]
        return self.document.text[s:e]


def make_document(path: str, text: str) -> Document:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return Document(path=path, text=text, encoding="utf-8", sha256=sha)


def join_pages(path: str, pages: list[str]) -> tuple[Document, list[tuple[int, int]]]:
    """One text for a paged source, pages separated by a form feed line; returns the page ranges."""
    parts: list[str] = []
    ranges: list[tuple[int, int]] = []
    pos = 0
    for i, page in enumerate(pages):
        page = page.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n")
        if i:
            parts.append("\n\f\n")
            pos += 3
        ranges.append((pos, pos + len(page)))
        parts.append(page)
        pos += len(page)
    return make_document(path, "".join(parts)), ranges


def close_sections(sections: list[Section], text_len: int, pages: StructuredDocument | None = None) -> None:
    """Set every section's end (the next section's start) and, for paged text, its page range."""
    sections.sort(key=lambda s: s.start)
    for i, s in enumerate(sections):
        s.end = sections[i + 1].start if i + 1 < len(sections) else text_len
        if pages is not None and pages.pages:
            s.page_start = pages.page_of(s.start)
            s.page_end = max(s.page_start or 1, pages.page_of(max(s.start, s.end - 1)) or 1)


def from_lines(path: str, lines: list[str], heads: list[tuple[str, int, int]], empty: str) -> StructuredDocument:
    """A document from text lines and its headings as (title, level, line index); `empty` is the
    error when there is no text. Shared by the DOCX and HTML loaders."""
    from knowtree.errors import InputError

    text = "\n".join(lines)
    if not text.strip():
        raise InputError(path, empty)
    document = make_document(path, text)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    sections = [
        Section(title=t, level=lv, start=offsets[i], body=min(offsets[i + 1], len(text)))
        for t, lv, i in heads
    ]
    close_sections(sections, len(text))
    return StructuredDocument(document=document, sections=sections, source="headings")


def is_structured_path(path: str) -> bool:
    return os.path.splitext(path)[1].lower() in STRUCTURED_SUFFIXES
