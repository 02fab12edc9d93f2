"""Markdown sections from its headings (ATX and setext, never inside code blocks), via markdown-it-py."""

from __future__ import annotations

from knowtree.ingest.structure import Section, StructuredDocument, close_sections
from knowtree.types import Document


def markdown_sections(doc: Document) -> StructuredDocument:
    from markdown_it import MarkdownIt

    text = doc.text
    line_starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            line_starts.append(i + 1)
    tokens = MarkdownIt("commonmark").parse(text)
    sections: list[Section] = []
    for i, tok in enumerate(tokens):
        if tok.type != "heading_open" or tok.map is None:
            continue
        inline = tokens[i + 1] if i + 1 < len(tokens) else None
        title = " ".join((inline.content if inline is not None else "").split())
        if not title:
            continue
        level = int(tok.tag[1:])
        after = tok.map[1]  # the line after the heading (a setext heading has two)
        body = line_starts[after] if after < len(line_starts) else len(text)
        sections.append(Section(title=title, level=level, start=line_starts[tok.map[0]], body=body))
    close_sections(sections, len(text))
    return StructuredDocument(document=doc, sections=sections, source="headings")


def heading_count(doc: Document) -> int:
    return len(markdown_sections(doc).sections)
