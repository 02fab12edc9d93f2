"""Route each input file to its loader: PDF, DOCX, HTML by structure; Markdown by headings on request;
everything else as text (the chunk-based core tree).

`has_structured_input` decides, before anything is read, whether a build takes the structured path:
a build of only text and Markdown files (without `structure="headings"`) stays the core build.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

from knowtree.errors import InputError
from knowtree.ingest.formats import ALL_SUFFIXES, NO_FILES
from knowtree.ingest.problems import Mapper, Skipped, load_each, missing_reason
from knowtree.ingest.roots import ReadRoots
from knowtree.ingest.structure import StructuredDocument
from knowtree.ingest.text import load_documents

_GLOB = frozenset("*?[")


def _kind(path: str) -> str:
    from knowtree.ingest.pdf import is_pdf

    ext = os.path.splitext(path)[1].lower()
    if ext == ".docx":
        return "docx"
    if ext in (".html", ".htm"):
        return "html"
    if ext == ".pdf" or (os.path.isfile(path) and is_pdf(path)):
        return "pdf"
    return "text"


def expand(entries: Sequence[str]) -> list[str]:
    """Files named by entries (files, directories, globs), text and structured formats, in order."""
    out: list[str] = []
    seen: set[str] = set()
    for entry in entries:
        if os.path.isdir(entry):
            found = []
            for dirpath, dirnames, filenames in os.walk(entry):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for name in sorted(filenames):
                    if not name.startswith(".") and os.path.splitext(name)[1].lower() in ALL_SUFFIXES:
                        path = os.path.join(dirpath, name)
                        found.append(os.path.normpath(path) if os.path.normpath(entry) == "." else path)
            if not found:
                raise InputError(entry, NO_FILES)
            files = sorted(found)
        elif os.path.exists(entry):
            if not os.path.isfile(entry):
                raise InputError(entry, "not a regular file")
            files = [entry]
        elif _GLOB.intersection(entry):
            files = sorted(
                m
                for m in glob.glob(entry, recursive=True)
                if os.path.isfile(m) and os.path.splitext(m)[1].lower() in ALL_SUFFIXES
            )
            if not files:
                raise InputError(entry, NO_FILES)
        else:
            raise InputError(entry, missing_reason(entry))
        for f in files:
            key = os.path.realpath(f)
            if key not in seen:
                seen.add(key)
                out.append(f)
    return out


def has_structured_input(entries: Sequence[str], within: ReadRoots | None = None) -> bool:
    """True when some entry is (or, for a directory or glob, holds) a PDF, DOCX or HTML file.
    Missing paths answer False: the core loader then reports them as it always has. A file outside
    `within` is not looked into (the loader refuses it)."""
    try:
        files = expand(entries)
    except InputError:
        return False
    return any(_kind(f) != "text" for f in files if within is None or _inside(within, f))


def _inside(within: ReadRoots, path: str) -> bool:
    try:
        within.check(path)
    except InputError:
        return False
    return True


def load_sources(
    entries: Sequence[str],
    *,
    headings: bool = False,
    max_bytes: int = 50_000_000,
    skip_bad: bool = False,
    skipped: list[Skipped] | None = None,
    within: ReadRoots | None = None,
    mapper: Mapper | None = None,
) -> list[StructuredDocument]:
    """Every file as a `StructuredDocument`. Every file is tried: one unreadable file raises its
    `InputError`, several a `BadFilesError` naming each; with `skip_bad` the bad ones are appended to
    `skipped` instead (an error only when no file is good). `max_bytes`: the largest text file accepted.
    `within`: read only files that resolve under these roots (`knowtree.ingest.roots`)."""
    return load_each(
        entries,
        lambda entry: expand([entry]),
        lambda path: _load_one(path, headings, max_bytes),
        skip_bad=skip_bad,
        skipped=skipped,
        within=within,
        mapper=mapper,
    )


def _load_one(path: str, headings: bool, max_bytes: int) -> StructuredDocument:
    from knowtree.ingest.docx import load_docx
    from knowtree.ingest.html import load_html
    from knowtree.ingest.markdown import markdown_sections
    from knowtree.ingest.pdf import load_pdf

    kind = _kind(path)
    if kind == "pdf":
        return load_pdf(path)
    if kind == "docx":
        return load_docx(path)
    if kind == "html":
        return load_html(path)
    doc = load_documents([path], max_bytes=max_bytes)[0]
    if headings and os.path.splitext(path)[1].lower() in (".md", ".markdown"):
        return markdown_sections(doc)
    return StructuredDocument(document=doc, sections=[], source="chunks")
