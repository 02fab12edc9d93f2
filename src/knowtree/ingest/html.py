"""HTML sections from <h1>-<h6>, via beautifulsoup4: visible text one block per line."""

from __future__ import annotations

import os

from knowtree.errors import InputError
from knowtree.ingest.structure import StructuredDocument, from_lines
from knowtree.ingest.text import load_documents

_BLOCKS = ("p", "li", "pre", "td", "th", "dt", "dd", "blockquote", "caption", "figcaption")
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")


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
    lines: list[str] = []
    heads: list[tuple[str, int, int]] = []
    for el in soup.find_all([*_HEADINGS, *_BLOCKS]):
        if el.find_parent([*_HEADINGS, *_BLOCKS]) is not None:
            continue  # nested blocks are part of their outer block's text
        text = " ".join(el.get_text(" ").split())
        if not text:
            continue
        if el.name in _HEADINGS:
            heads.append((text, int(el.name[1]), len(lines)))
        lines.append(text)
    if not lines:  # no block markup at all: the visible text as it is
        lines = [ln.strip() for ln in soup.get_text("\n").splitlines() if ln.strip()]
    return from_lines(path, lines, heads, "HTML has no visible text")
