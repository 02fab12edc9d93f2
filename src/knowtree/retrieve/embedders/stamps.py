"""Remembering that a pinned file was verified, so a new process need not hash it again.

Hashing the default embedder's 15 MB table took ~30 ms of every cold question. After a file's
sha256 matched its pin, a stamp records the file's identity as the file system reports it (device,
inode, size, modification and change times in nanoseconds) in the user's cache directory
(`$XDG_CACHE_HOME/knowtree/verified`, i.e. `~/.cache/knowtree/verified`); a later load whose file
still has that identity and the same pin skips the hash. Writing the file, replacing it, or even
restoring its modification time afterwards moves its change time (`st_ctime_ns`, which no user call
can set back), so a changed file is hashed again, and refused. A cache directory that cannot be
written just means hashing every time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path


def stamp_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "knowtree" / "verified"


def _identity(path: Path, sha256: str) -> dict[str, object] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return {
        "path": str(path.resolve()),
        "sha256": sha256,
        "dev": st.st_dev,
        "ino": st.st_ino,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
    }


def _stamp_file(path: Path) -> Path:
    return stamp_dir() / (hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32] + ".json")


def is_verified(path: Path, sha256: str) -> bool:
    """Whether `path` was verified against `sha256` and has not changed since (no hashing)."""
    now = _identity(path, sha256)
    if now is None:
        return False
    try:
        stamp = json.loads(_stamp_file(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return stamp == now


def remember(path: Path, sha256: str) -> None:
    """Record that `path` matched `sha256` just now (best effort: an unwritable cache is skipped)."""
    now = _identity(path, sha256)
    if now is None:
        return
    target = _stamp_file(path)
    with contextlib.suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(now, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, target)
