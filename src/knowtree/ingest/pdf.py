"""Read a PDF with pypdf: the text of every physical page, and the outline (bookmarks) when there is one.

A PDF that cannot be read (corrupt, truncated, encrypted with a password, no extractable text)
raises `InputError` naming the file, before anything is stored. The table-of-contents and
LLM-proposed structure paths for PDFs without an outline live in `build.toc`.
"""

from __future__ import annotations

import logging
import os
import re

from knowtree.errors import InputError
from knowtree.ingest.structure import Section, StructuredDocument, close_sections, join_pages
from knowtree.ingest.text import without_nul

PDF_MAGIC = b"%PDF-"


def is_pdf(path: str) -> bool:
    if path.lower().endswith(".pdf"):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(1024).lstrip().startswith(PDF_MAGIC)
    except OSError:
        return False


def load_pdf(path: str, *, max_bytes: int = 200_000_000) -> StructuredDocument:
    """Pages and outline of one PDF. Sections are empty when the PDF has no outline."""
    try:
        import pypdf
        from pypdf.errors import PdfReadError
    except ImportError as exc:  # pragma: no cover - pypdf is a core dependency
        raise InputError(path, "reading PDFs needs pypdf (pip install pypdf)") from exc
    if not os.path.isfile(path):
        raise InputError(path, "no such file or directory")
    size = os.path.getsize(path)
    if size == 0:
        raise InputError(path, "file is empty")
    if size > max_bytes:
        raise InputError(path, f"file is too large ({size / 1e6:.1f} MB > {max_bytes / 1e6:.1f} MB)")
    with open(path, "rb") as f:
        head = f.read(1024)
    if PDF_MAGIC not in head:
        raise InputError(path, "not a PDF file (no %PDF header)")
    # pypdf logs recoverable damage as warnings; a clean one-line error is ours to give
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = pypdf.PdfReader(path, strict=False)
        if reader.is_encrypted:
            try:
                ok = reader.decrypt("")
            except Exception as exc:
                raise InputError(path, f"PDF is encrypted and cannot be opened ({_short(exc)})") from exc
            if not ok:
                raise InputError(path, "PDF is encrypted with a password; decrypt it first")
        texts = [_page_text(page) for page in reader.pages]
        outline = _outline(reader)
    except InputError:
        raise
    except (PdfReadError, Exception) as exc:  # pypdf raises many types on damaged files
        raise InputError(path, f"corrupt or unreadable PDF ({_short(exc)})") from exc
    if not texts:
        raise InputError(path, "PDF has no pages")
    if sum(len(t.strip()) for t in texts) < 20:
        raise InputError(path, "PDF has no extractable text (scanned images need OCR first)")
    document, ranges = join_pages(path, texts)
    doc = StructuredDocument(document=document, sections=[], pages=ranges, source="outline")
    if outline:
        doc.sections = sections_from_pages(doc, outline)
    return doc


def sections_from_pages(doc: StructuredDocument, entries: list[tuple[str, int, int]]) -> list[Section]:
    """Sections from (title, level, physical page) entries: each starts where its title is found on
    its page (the page's start when not found), so two sections on one page keep their order."""
    sections: list[Section] = []
    last = 0
    for title, level, page in entries:
        if not doc.pages or not 1 <= page <= len(doc.pages):
            continue
        p_start, p_end = doc.pages[page - 1]
        lo = max(p_start, last + 1) if sections and last < p_end else p_start
        text = doc.document.text
        found = title_range(text, title, lo, p_end)
        start = found[0] if found is not None else max(p_start, min(last, p_end))
        # the text after the heading: the line after the title's last character (unknown when not found)
        newline = text.find("\n", found[1]) if found is not None else -2
        body = -1 if newline == -2 else (len(text) if newline < 0 else newline + 1)
        last = start
        sections.append(Section(title=title, level=level, start=start, body=body))
    close_sections(sections, len(doc.document.text), doc)
    return sections


def _normal(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", text.lower())


def find_title(text: str, title: str, lo: int, hi: int) -> int | None:
    """Where `title` appears in text[lo:hi], ignoring case, spacing and punctuation (PDF text often
    splits words: "Manage ment"), or None. Returns the offset of the first matching character."""
    found = title_range(text, title, lo, hi)
    return found[0] if found is not None else None


def title_range(text: str, title: str, lo: int, hi: int) -> tuple[int, int] | None:
    """`find_title`'s match as (first matching character, one past the last), or None."""
    target = _normal(title)[:60]
    if len(target) < 3:
        return None
    window = text[lo:hi]
    keep = [i for i, ch in enumerate(window) if ch.isalnum()]
    flat = "".join(window[i].lower() for i in keep)
    j = flat.find(target)
    if j < 0:
        return None
    last = len(keep) - 1  # (a letter whose lower case is longer would shift `flat` past `keep`)
    return lo + keep[min(j, last)], lo + keep[min(j + len(target) - 1, last)] + 1


def title_on_page(doc: StructuredDocument, title: str, page: int) -> bool:
    if not doc.pages or not 1 <= page <= len(doc.pages):
        return False
    s, e = doc.pages[page - 1]
    return find_title(doc.document.text, title, s, e) is not None


def _page_text(page: object) -> str:
    try:
        return without_nul(page.extract_text() or "")  # type: ignore[attr-defined]
    except Exception:  # one damaged page should not lose the document
        return ""


def _outline(reader: object) -> list[tuple[str, int, int]]:
    """(title, level, physical page 1-based) for every bookmark that points at a page."""
    out: list[tuple[str, int, int]] = []

    def walk(items: list, level: int) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item, level + 1)
                continue
            try:
                page = reader.get_destination_page_number(item)  # type: ignore[attr-defined]
            except Exception:
                continue
            title = " ".join(without_nul(str(getattr(item, "title", "") or "")).split())
            if title and page is not None and page >= 0:
                out.append((title, level, page + 1))

    try:
        walk(reader.outline, 1)  # type: ignore[attr-defined]
    except Exception:
        return []
    return out


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:160]
