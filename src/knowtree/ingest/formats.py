"""The one registry of the file kinds a build reads, by suffix: text, PDF, Word (DOCX), HTML.

The loaders (`ingest.text` for text, `ingest.sources` for everything) take their suffixes from here,
and so does the message naming what a folder or pattern that matched nothing could have held.
"""

from __future__ import annotations

#: each kind a build reads, with its suffixes (text first: the core build's)
FORMATS: dict[str, tuple[str, ...]] = {
    "text": (".txt", ".md", ".markdown", ".rst", ".text"),
    "PDF": (".pdf",),
    "Word": (".docx",),
    "HTML": (".html", ".htm"),
}
TEXT_SUFFIXES: tuple[str, ...] = FORMATS["text"]
STRUCTURED_SUFFIXES: tuple[str, ...] = tuple(s for kind, sfx in FORMATS.items() if kind != "text" for s in sfx)
ALL_SUFFIXES: tuple[str, ...] = TEXT_SUFFIXES + STRUCTURED_SUFFIXES

#: why a folder or glob pattern gave no file to read
NO_FILES = "no supported files found (" + "; ".join(f"{kind}: {' '.join(sfx)}" for kind, sfx in FORMATS.items()) + ")"
