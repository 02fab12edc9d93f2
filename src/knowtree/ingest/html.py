"""HTML sections from <h1>-<h6>, via beautifulsoup4: all visible text, one block per line.

Headings and text blocks (paragraphs, list items, cells...) are a line each; text outside any block
(loose in <body> or a <div>, between blocks) is kept too, a line per run between block boundaries,
so a structure tree holds every visible character.
"""

from __future__ import annotations

import os
from typing import Any

from knowtree.errors import InputError
from knowtree.ingest.structure import StructuredDocument, from_lines
from knowtree.ingest.text import load_documents

_BLOCKS = ("p", "li", "pre", "td", "th", "dt", "dd", "blockquote", "caption", "figcaption")
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
# containers whose start and end end a line of loose text (their blocks are lines of their own)
_BREAKS = frozenset(
    (
        "div", "section", "article", "header", "footer", "main", "nav", "aside", "ul", "ol", "dl",
        "table", "thead", "tbody", "tfoot", "tr", "form", "fieldset", "figure", "details", "summary",
        "address", "hr", "br", "center", "menu", "legend", "picture", "video", "audio", "iframe",
    )
)  # fmt: skip


def load_html(path: str) -> StructuredDocument:
    try:
        from bs4 import BeautifulSoup
    except ImportError as exc:
        raise InputError(path, 'reading HTML needs beautifulsoup4 (pip install "knowtree[docs]")') from exc
    if not os.path.isfile(path):
        raise InputError(path, "no such file or directory")
    raw = load_documents([path])[0].text  # decoding, binary and empty checks as for text files
    soup = BeautifulSoup(raw, "html.parser")
    for tag in soup(["script", "style", "noscript", "template", "head"]):
        tag.decompose()
    lines, heads, marked = visible_lines(soup)
    if not marked:  # no block markup at all: the visible text as it is, line by line
        lines = [ln.strip() for ln in soup.get_text("\n").splitlines() if ln.strip()]
    return from_lines(path, lines, heads, "HTML has no visible text")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def visible_lines(soup: Any) -> tuple[list[str], list[tuple[str, int, int]], bool]:
    """(lines, headings as (title, level, line index), whether any block markup was seen), in
    reading order. Walked with an explicit stack: deep nesting cannot exhaust Python's recursion."""
    from bs4 import CData, NavigableString, Tag

    lines: list[str] = []
    heads: list[tuple[str, int, int]] = []
    loose: list[str] = []
    marked = False

    def flush() -> None:
        text = _one_line(" ".join(loose))
        loose.clear()
        if text:
            lines.append(text)

    stack: list[tuple[Any, bool]] = [(iter(soup.children), False)]  # (children, ends a line)
    while stack:
        child = next(stack[-1][0], None)
        if child is None:
            if stack.pop()[1]:
                flush()
            continue
        if isinstance(child, NavigableString):
            if type(child) is NavigableString or isinstance(child, CData):  # not comments, doctypes
                loose.append(str(child))
            continue
        if not isinstance(child, Tag):
            continue
        name = (child.name or "").lower()
        if name in _HEADINGS or name in _BLOCKS:
            marked = True
            flush()
            text = _one_line(child.get_text(" "))  # nested blocks are part of this block's line
            if text:
                if name in _HEADINGS:
                    heads.append((text, int(name[1]), len(lines)))
                lines.append(text)
        elif name in _BREAKS:
            marked = True
            flush()
            stack.append((iter(child.children), True))
        else:
            stack.append((iter(child.children), False))
    flush()
    return lines, heads, marked
