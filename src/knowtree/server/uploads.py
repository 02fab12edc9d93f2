"""Uploaded files: saved under the server's upload folder (one new folder per request), checked by
name and size, for a build job to read. Used by the tree and knowledge-base upload routes."""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path

from fastapi import UploadFile
from fastapi.concurrency import run_in_threadpool

from knowtree.errors import InputError
from knowtree.ingest.limits import InflateLimitError, check_zip, gzip_size
from knowtree.server.problems import Problem

UPLOAD_SUFFIXES = {".txt", ".md", ".markdown", ".pdf", ".docx", ".html", ".htm"}


async def save_uploads(
    root: Path, groups: dict[str, list[UploadFile]], limit: int, suffixes: dict[str, set[str]] | None = None,
    *, max_inflated: int | None = None,
) -> tuple[Path, dict[str, list[str]]]:
    """Save each group's files (`{"files": [...]}` or, for a knowledge base, issues/docs/...) in a new
    folder under `root`; returns the folder and each group's saved paths. A compressed file (.gz, a
    DOCX) must inflate to at most `max_inflated` bytes (default: `limit`): 413 naming it, else.
    Nothing is left on an error."""
    target = root / uuid.uuid4().hex
    saved: dict[str, list[str]] = {}
    try:
        for group, files in groups.items():
            allowed = (suffixes or {}).get(group, UPLOAD_SUFFIXES)
            for f in files:
                name = safe_name(f.filename or "", allowed)
                path = target / name
                if path.exists():
                    raise Problem(400, f"two uploaded files are named {name!r}")
                path.parent.mkdir(parents=True, exist_ok=True)
                size = 0
                with path.open("wb") as out:
                    while chunk := await f.read(1 << 20):
                        size += len(chunk)
                        if size > limit:
                            raise Problem(413, f"{name!r} is over the upload limit of {limit:,} bytes")
                        out.write(chunk)
                await run_in_threadpool(_check_inflated, path, name, max_inflated or limit)
                saved.setdefault(group, []).append(str(path))
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return target, saved


def _check_inflated(path: Path, name: str, cap: int) -> None:
    """A compressed upload is inflated once, in bounded steps and without keeping it, so a bomb is
    refused now (413), not by the build job that would read it."""
    lower = name.lower()
    try:
        if lower.endswith(".gz"):
            gzip_size(str(path), cap)
        elif lower.endswith(".docx"):
            check_zip(str(path), cap)
    except InflateLimitError as exc:
        raise Problem(413, f"{name!r}: {exc.reason}") from None
    except InputError as exc:  # named by the file name the caller knows, not the server's path
        raise Problem(422, f"{name!r}: {exc.reason}") from None


def safe_name(raw: str, suffixes: set[str] = UPLOAD_SUFFIXES) -> str:
    name = Path(raw.replace("\\", "/")).name
    if not name or not re.fullmatch(r"[\w .()+,-]{1,200}", name) or name.startswith("."):
        raise Problem(400, f"uploaded file name {raw!r}: use letters, digits, spaces, '.', '-', '_'")
    if not any(name.lower().endswith(s) for s in suffixes):
        raise Problem(415, f"{name!r}: upload {', '.join(sorted(suffixes))} files")
    return name
