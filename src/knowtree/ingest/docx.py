"""DOCX sections from heading paragraphs (styles "Heading N" / "Title"), via python-docx.

The document's text is its paragraphs (and table rows, tab-separated) one per line, so a section's
line span is its paragraph span.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from knowtree.errors import InputError
from knowtree.ingest.limits import check_zip
from knowtree.ingest.structure import StructuredDocument, from_lines

_HEADING = re.compile(r"^heading\s*(\d)$", re.IGNORECASE)


def load_docx(path: str) -> StructuredDocument:
    try:
        import docx
        from docx.opc.exceptions import PackageNotFoundError
    except ImportError as exc:
        raise InputError(path, 'reading DOCX files needs python-docx (pip install "knowtree[docs]")') from exc
    if not os.path.isfile(path):
        raise InputError(path, "no such file or directory")
    if os.path.getsize(path) == 0:
        raise InputError(path, "file is empty")
    check_zip(path)  # a DOCX is a zip: its parts inflate within the cap (limits.py) before reading
    try:
        d = docx.Document(path)
    except (PackageNotFoundError, Exception) as exc:
        raise InputError(path, f"corrupt or unreadable DOCX ({' '.join(str(exc).split())[:160]})") from exc
    lines: list[str] = []
    heads: list[tuple[str, int, int]] = []  # (title, level, line index)
    body = d.element.body
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    for child in _blocks(body):
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "p":
            para = Paragraph(child, d)
            text = " ".join(para.text.split())
            style = (para.style.name if para.style is not None else "") or ""
            m = _HEADING.match(style.strip())
            level = int(m.group(1)) if m else (1 if style.strip().lower() == "title" else 0)
            if level and text:
                heads.append((text, level, len(lines)))
            lines.append(text)
        elif tag == "tbl":
            for row in Table(child, d).rows:
                lines.append("\t".join(" ".join(c.text.split()) for c in row.cells))
    return from_lines(path, lines, heads, "DOCX has no text")


def _blocks(body: Any) -> Iterator[Any]:
    """The body's paragraphs and tables in order, those inside content controls (<w:sdt>) too."""
    for child in body.iterchildren():
        if child.tag.rsplit("}", 1)[-1] != "sdt":
            yield child
            continue
        for part in child.iterchildren():
            if part.tag.rsplit("}", 1)[-1] == "sdtContent":
                yield from _blocks(part)
