"""Markdown sections from its headings (ATX and setext, never inside code blocks), via markdown-it-py."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from knowtree.ingest.structure import Section, StructuredDocument, close_sections
from knowtree.types import Document

_NEWLINE = re.compile("\n")


@cache
def _parser() -> Any:
    """A CommonMark parser of blocks only: a heading's title is its inline token's `content`, which the
    block rules set, so the inline rules (emphasis, links: a third of the parse) are not run."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").disable("inline")


def markdown_sections(doc: Document) -> StructuredDocument:
    text = doc.text
    line_starts = [0, *(m.end() for m in _NEWLINE.finditer(text))]
    tokens = _parser().parse(text)
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
