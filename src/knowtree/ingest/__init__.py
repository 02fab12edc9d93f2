"""Ingest: turn the files, directories and glob patterns a user names into decoded `Document`s.

Everything is validated before anything is returned, so a caller can reject a whole batch
(one binary file, one missing path) before it touches storage.
"""

from __future__ import annotations

from knowtree.ingest.text import SUPPORTED_SUFFIXES, load_documents

__all__ = ["SUPPORTED_SUFFIXES", "load_documents"]
