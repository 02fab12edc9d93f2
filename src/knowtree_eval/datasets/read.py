"""Reading dataset files: JSON / JSONL (gzip too) with errors naming the file and record, passage
chunking, and the gold-evidence clean-up every loader shares."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from knowtree.errors import InputError, UserError
from knowtree.retrieve.bm25 import Passage
from knowtree_eval.datasets.base import Case, Dataset


def read_json(path: Path) -> Any:
    try:
        with open_text(path) as f:
            return json.load(f)
    except OSError as exc:
        raise InputError(str(path), f"cannot read ({exc.strerror or exc})") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(str(path), f"not valid JSON ({exc})") from exc


def open_text(path: Path) -> Any:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def jsonl_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a bad line names its number."""
    try:
        with open_text(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(str(path), f"line {n}: not valid JSON ({exc})") from exc
                if not isinstance(obj, dict):
                    raise InputError(str(path), f"line {n}: expected a JSON object, got {type(obj).__name__}")
                yield n, obj
    except OSError as exc:
        raise InputError(str(path), f"cannot read ({exc.strerror or exc})") from exc
    except (UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(str(path), f"cannot decode ({exc})") from exc


def need(obj: dict[str, Any], key: str, path: Path, where: str, kind: type | tuple[type, ...] = str) -> Any:
    if key not in obj or obj[key] is None:
        raise InputError(str(path), f"{where}: missing {key!r}")
    value = obj[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise InputError(str(path), f"{where}: {key!r} should be {names}, got {type(value).__name__}")
    return value


def chunk_passages(doc: str, text: str, size: int) -> list[Passage]:
    """Cut a long document into passages with knowtree's own chunker (paragraph/sentence boundaries)."""
    if len(text) <= size:
        return [Passage(id=doc, text=text, doc=doc)]
    from knowtree.ingest.chunk import chunk_document
    from knowtree.types import Document

    d = Document(path=doc, text=text, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())
    return [
        Passage(
            id=f"{doc}#{c.index}",
            text=c.text,
            doc=doc,
            meta={"line_start": c.span.line_start, "line_end": c.span.line_end},
        )
        for c in chunk_document(d, size=max(size, 200))
    ]


def limit_cases(cases: list[Case], limit: int | None) -> list[Case]:
    if limit is not None and limit < 0:
        raise UserError(f"--limit must be 0 or more, got {limit}")
    return cases if limit is None else cases[:limit]


def keep_known_evidence(dataset: Dataset) -> None:
    """Drop gold ids that name nothing in the corpus (typos in the source data), and say so."""
    dropped: list[str] = []
    for case in dataset.cases:
        corpus = dataset.corpora[case.corpus]
        known = [e for e in case.evidence if corpus.knows(e)]
        dropped.extend(f"{case.id}:{e}" for e in case.evidence if not corpus.knows(e))
        case.evidence = known
    if dropped:
        shown = ", ".join(dropped[:5]) + (" …" if len(dropped) > 5 else "")
        dataset.notes.append(f"{len(dropped)} evidence id(s) not in the corpus were ignored ({shown})")


def prune(ds: Dataset) -> Dataset:
    """Keep only the corpora the (limited) cases use."""
    used = {c.corpus for c in ds.cases}
    ds.corpora = {k: v for k, v in ds.corpora.items() if k in used}
    return ds
