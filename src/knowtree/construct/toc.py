"""Structure for a PDF without an outline: its table of contents, else a structure the LLM proposes.

1. Table of contents: pages among the first ones that look like a contents page (the word
   "contents" or many titles followed by page numbers) are shown to the model in one call, which says
   whether they hold a table of contents and lists its entries (title, printed page or none, level).
2. Printed pages are mapped to physical pages: the offset (physical − printed) most entries agree on,
   found by looking for every title on the pages after the contents. Each entry is then verified (its
   title must appear on its page) and repaired when not: the pages around it are searched, a bounded
   number of pages each way, and entries without a page are looked for after the previous entry.
   Entries that stay unverified are dropped; if too few verify, the TOC is not trusted.
3. Otherwise the model proposes sections from the opening lines of each page (a few calls for the
   whole document), verified the same way.
4. If nothing works, pages are grouped in fixed windows (no model call, recorded in `source`).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pydantic import field_validator

from knowtree.errors import ModelOutputError
from knowtree.ingest.pdf import find_title, sections_from_pages
from knowtree.ingest.structure import Section, StructuredDocument, close_sections
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import Reply, ask, at_most, narrowed, one_of, reply_schema, string
from knowtree.types import Usage

SCAN_PAGES = 12  # a table of contents is looked for in the first pages only
MAX_TOC_PAGES = 3
REPAIR_WINDOW = 3  # pages searched each way when an entry's title is not on its page
MIN_VERIFIED = 0.5  # share of entries that must verify for the TOC to be used
MIN_SPREAD = 0.2  # the verified entries must span at least this share of the pages
TOC_CHARS = 6000
PAGES_PER_CALL = 40
PAGE_OPENING = 160

_NUMBERED = re.compile(r"[A-Za-z)\]][ .\t]*?\.{0,}[ \t]*\d{1,3}(?=\s|$)")
_CONTENTS = re.compile(r"\b(table of contents|contents|index)\b", re.IGNORECASE)


def _clamp_level(cls: Any, v: Any) -> Any:
    try:
        return min(max(int(v), 1), 3)
    except (TypeError, ValueError):
        return 1


class TocEntry(Reply):
    title: str = string(120, ..., min_length=1)
    page: int | None = None
    level: int = one_of([1, 2, 3], default=1)

    _level = field_validator("level", mode="before")(classmethod(_clamp_level))

    @field_validator("page", mode="before")
    @classmethod
    def _page(cls, v: Any) -> Any:
        if v in (None, "", "null"):
            return None
        try:
            return int(str(v).strip())
        except ValueError:
            return None


class TocReply(Reply):
    is_toc: bool
    entries: list[TocEntry] = at_most(60, list)


class ProposedSection(Reply):
    title: str = string(100, ..., min_length=1)
    page: int  # one of the pages shown (`structure_reply`)
    level: int = one_of([1, 2], default=1)

    _level = field_validator("level", mode="before")(classmethod(_clamp_level))


class StructureReply(Reply):
    sections: list[ProposedSection] = at_most(30, list)


def structure_reply(pages: list[int]) -> type[StructureReply]:
    """`StructureReply` whose sections start on one of the pages shown."""
    return narrowed(StructureReply, sections=list[narrowed(ProposedSection, page={"enum": pages})])


TOC_SCHEMA: dict[str, Any] = reply_schema(TocReply)  # derived: the schema a TOC call sends


def toc_candidates(doc: StructuredDocument) -> list[int]:
    """1-based pages among the first ones that look like a table of contents: the most TOC-like page
    (titles followed by page numbers, under a "contents" heading) and the dense pages right after it."""
    assert doc.pages is not None
    scored: list[tuple[int, float, bool]] = []  # (page, numbered entries, dense)
    for page in range(1, min(SCAN_PAGES, len(doc.pages)) + 1):
        text = doc.page_text(page)
        numbered = len(_NUMBERED.findall(text))
        dense = numbered >= 8 and numbered * 1000 / max(len(text), 1) >= 2.5
        named = _CONTENTS.search(text[:400]) is not None and numbered >= 3
        if dense or named:
            scored.append((page, numbered * (2 if named else 1) * (2 if dense else 1), dense))
    if not scored:
        return []
    best = max(scored, key=lambda x: (x[1], -x[0]))[0]
    found = [best]
    dense_pages = {p for p, _, d in scored if d}
    while len(found) < MAX_TOC_PAGES and found[-1] + 1 in dense_pages:
        found.append(found[-1] + 1)
    return found


def find_structure(doc: StructuredDocument, client: LLMClient, *, max_pages: int = 4) -> Usage:
    """Fill `doc.sections` (and `doc.source`) for a paged document without an outline."""
    usage = Usage()
    candidates = toc_candidates(doc)
    if candidates:
        entries, used = _read_toc(doc, candidates, client)
        usage.add(used)
        if entries:
            placed = place_entries(doc, entries, after=candidates[-1])
            if placed is not None:
                doc.sections, doc.source = sections_from_pages(doc, placed), "toc"
                return usage
    proposed, used = _propose(doc, client, skip=set(candidates))
    usage.add(used)
    if proposed:
        doc.sections, doc.source = sections_from_pages(doc, proposed), "llm"
        return usage
    doc.sections, doc.source = page_windows(doc, max_pages), "pages"
    return usage


def _read_toc(doc: StructuredDocument, pages: list[int], client: LLMClient) -> tuple[list[TocEntry], Usage]:
    lines = [" ".join(ln.split()) for p in pages for ln in doc.page_text(p).splitlines()]
    text = "\n".join(ln for ln in lines if ln)[:TOC_CHARS]
    try:
        result = ask(
            client,
            TocReply,
            "toc_extract",
            text=text,
            purpose="toc",
            max_tokens=1800,
        )
    except ModelOutputError as exc:
        return [], exc.usage if isinstance(exc.usage, Usage) else Usage()
    reply = result.value
    return (clean_entries(reply.entries) if reply.is_toc else []), result.usage


_TOC_HEADINGS = {"tableofcontents", "contents", "index", "page"}


def clean_entries(entries: list[TocEntry]) -> list[TocEntry]:
    """Drop what a table of contents shows that is not a section: its own heading, and leading
    entries that would hold every other entry (the document's title: a section that is the whole
    document adds a level and nothing else)."""
    out = [e for e in entries if "".join(ch for ch in e.title.lower() if ch.isalnum()) not in _TOC_HEADINGS]
    while len(out) > 2 and all(e.level > out[0].level for e in out[1:]):
        out = out[1:]
    return out


def place_entries(
    doc: StructuredDocument, entries: list[TocEntry], *, after: int
) -> list[tuple[str, int, int]] | None:
    """(title, level, physical page) for the entries that verify, or None when too few do."""
    assert doc.pages is not None
    n = len(doc.pages)
    first = min(after + 1, n)
    text = doc.document.text

    def pages_with(title: str) -> list[int]:
        return [p for p in range(first, n + 1) if find_title(text, title, *doc.pages[p - 1]) is not None]

    # the printed → physical offset most entries agree on
    votes: Counter[int] = Counter()
    for e in entries:
        if e.page is not None:
            for p in pages_with(e.title)[:6]:
                votes[p - e.page] += 1
    offset = votes.most_common(1)[0][0] if votes else None

    placed: list[tuple[str, int, int]] = []
    last = first
    for e in entries:
        title = " ".join(e.title.split())
        page = None
        if e.page is not None and offset is not None:
            guess = e.page + offset
            # the guess first, then nearer pages before farther ones (bounded repair)
            tries = [guess] + [guess + d * s for d in range(1, REPAIR_WINDOW + 1) for s in (1, -1)]
            page = next((p for p in tries if last <= p <= n and _on(doc, title, p)), None)
        if page is None:  # no printed page, or not near it: the next page after the previous entry
            page = next((p for p in range(last, n + 1) if _on(doc, title, p)), None)
        if page is not None:
            placed.append((title, e.level, page))
            last = page
    if len(placed) < 2 or len(placed) < MIN_VERIFIED * len(entries):
        return None
    pages = [p for _, _, p in placed]
    # a contents page whose entries all land together (the cover's headings read as entries) does
    # not describe the document: the structure is looked for another way
    if len(set(pages)) < 2 or max(pages) - min(pages) < MIN_SPREAD * n:
        return None
    return placed


def _on(doc: StructuredDocument, title: str, page: int) -> bool:
    assert doc.pages is not None
    return find_title(doc.document.text, title, *doc.pages[page - 1]) is not None


def _propose(
    doc: StructuredDocument, client: LLMClient, *, skip: set[int]
) -> tuple[list[tuple[str, int, int]], Usage]:
    assert doc.pages is not None
    usage = Usage()
    numbers = [p for p in range(1, len(doc.pages) + 1) if p not in skip and doc.page_text(p).strip()]
    out: list[tuple[str, int, int]] = []
    for i in range(0, len(numbers), PAGES_PER_CALL):
        batch = numbers[i : i + PAGES_PER_CALL]
        shown = "\n".join(f"<page {p}> {' '.join(doc.page_text(p).split())[:PAGE_OPENING]}" for p in batch)
        try:
            result = ask(
                client,
                structure_reply(batch),
                "structure_propose",
                pages=shown,
                purpose="structure",
                max_tokens=1200,
            )
        except ModelOutputError as exc:
            if isinstance(exc.usage, Usage):
                usage.add(exc.usage)
            continue
        usage.add(result.usage)
        last = out[-1][2] if out else 0
        for s in sorted(result.value.sections, key=lambda s: s.page):
            title = " ".join(s.title.split())
            # verified: the title is on its page (or one page later), pages in order
            page = next((p for p in (s.page, s.page + 1) if p in batch and _on(doc, title, p)), None)
            if page is not None and page >= last:
                out.append((title, s.level, page))
                last = page
    return out, usage


def page_windows(doc: StructuredDocument, size: int) -> list[Section]:
    """Fixed page groups, the structure of last resort."""
    assert doc.pages is not None
    n = len(doc.pages)
    size = max(1, size)
    sections = [
        Section(title=f"Pages {p}-{min(p + size - 1, n)}", level=1, start=doc.pages[p - 1][0])
        for p in range(1, n + 1, size)
    ]
    close_sections(sections, len(doc.document.text), doc)
    return sections
