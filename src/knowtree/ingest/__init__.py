"""Ingest: turn the files, directories and glob patterns a user names into decoded `Document`s
(text, Markdown, PDF, DOCX, HTML, chats, knowledge-base inputs) and chunks.

Everything is validated before anything is returned, so a caller can reject a whole batch
(one binary file, one missing path) before it touches storage.
May import: config, text, types, errors (never the store, models or anything above).
"""

from __future__ import annotations

from knowtree.ingest.text import SUPPORTED_SUFFIXES, load_documents

__all__ = ["SUPPORTED_SUFFIXES", "load_documents"]
