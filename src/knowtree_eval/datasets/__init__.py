"""Benchmark loaders: every dataset becomes the same two things, questions (`Case`) and the text they
are asked over (`Corpus`), so every method and metric works on every dataset unchanged.

Passage ids are chosen so gold evidence can be compared with what a method retrieved:

| kind         | corpus                          | passage id            | evidence            |
|--------------|---------------------------------|-----------------------|---------------------|
| quality      | one article                     | `articleN#i` (chunks) | none                |
| hotpotqa     | every paragraph, pooled in one  | paragraph title       | the two gold titles |
| locomo       | one conversation                | dia_id (`D3:7`)       | dia_ids             |
| financebench | one filing (or all, `pooled`)   | `DOC#page` (0-based)  | `DOC#page`          |
| jsonl        | the line's documents            | doc id, or `doc#i`    | doc or passage ids  |

Malformed input raises `InputError` naming the file and the record, never a KeyError deep inside.
May import: knowtree.ingest, knowtree.errors, knowtree.types (no model, no store).
"""

from __future__ import annotations

from pathlib import Path

from knowtree.errors import InputError, UserError
from knowtree_eval.datasets.base import DEFAULT_CHUNK_CHARS, KINDS, Case, Corpus, Dataset
from knowtree_eval.datasets.financebench import default_pages_path, load_financebench
from knowtree_eval.datasets.hotpotqa import load_hotpotqa
from knowtree_eval.datasets.jsonl import load_jsonl
from knowtree_eval.datasets.locomo import LOCOMO_CATEGORIES, load_locomo
from knowtree_eval.datasets.quality import load_quality, parse_options


def load_dataset(
    kind: str, path: str | Path, *, limit: int | None = None, pages: str | Path | None = None
) -> Dataset:
    """Load any supported dataset by kind; `pages` is FinanceBench's pages file (default: next to PATH)."""
    kind = kind.lower()
    if kind not in KINDS:
        raise UserError(f"unknown dataset kind {kind!r}: use one of {', '.join(KINDS)}")
    p = Path(path)
    if not p.exists():
        raise InputError(str(p), "no such file")
    if kind == "quality":
        return load_quality(p, limit=limit)
    if kind == "hotpotqa":
        return load_hotpotqa(p, limit=limit)
    if kind == "locomo":
        return load_locomo(p, limit=limit)
    if kind == "financebench":
        return load_financebench(p, pages, limit=limit)
    return load_jsonl(p, limit=limit)


__all__ = [
    "DEFAULT_CHUNK_CHARS",
    "KINDS",
    "LOCOMO_CATEGORIES",
    "Case",
    "Corpus",
    "Dataset",
    "default_pages_path",
    "load_dataset",
    "load_financebench",
    "load_hotpotqa",
    "load_jsonl",
    "load_locomo",
    "load_quality",
    "parse_options",
]
