"""A tree index's vectors as a file beside an SQLite database, memory-mapped: what a new process
reads instead of every vector's row (a cold question on 10^5 entries read ~100 MB of rows first).

    <db>.vectors/<tree key>-<embedder key>-<content key>.f32   float32 rows, one per entry
    <db>.vectors/<...>.ids                                     the entries' ids, one a line

The file is a cache of `tree_index_vec`, named by the fingerprint of what the index's entries come
from (`tree_index_state.content`): a save that changes an entry changes the name, so a file is
never read for other entries than its own; the first search after a change writes the new file
(atomically: written aside, then renamed) and removes the tree's older ones. A directory that
cannot be written leaves the rows as the only source.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import operator
import os
from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def _key(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


def location(db: str, tree: str, embedder: str, content: str) -> tuple[Path, str]:
    """(the directory, the file stem) of a tree's vectors by an embedder for one content."""
    return Path(f"{db}.vectors"), f"{_key('tree', tree)}-{_key('emb', embedder)}-{_key('content', content)}"


def load(db: str, tree: str, embedder: str, content: str, dim: int) -> tuple[list[str], np.ndarray] | None:
    """The cached (ids, memory-mapped vectors), None when there is no (complete) file."""
    import numpy as np

    folder, stem = location(db, tree, embedder, content)
    ids_file, vec_file = folder / f"{stem}.ids", folder / f"{stem}.f32"
    try:
        ids = ids_file.read_text(encoding="utf-8").split("\n") if ids_file.stat().st_size else []
        if vec_file.stat().st_size != len(ids) * dim * 4:
            return None
        if not ids:
            return [], np.zeros((0, dim), dtype=np.float32)
        return ids, np.memmap(vec_file, dtype=np.float32, mode="r", shape=(len(ids), dim))
    except (OSError, ValueError):
        return None


def save(db: str, tree: str, embedder: str, content: str, ids: list[str], matrix: np.ndarray) -> None:
    """Write the cache for this content (and drop the tree's files for other contents), its rows in
    the order of their ids (what `Positions` searches by bisection)."""
    folder, stem = location(db, tree, embedder, content)
    if not is_sorted(ids):
        order = sorted(range(len(ids)), key=ids.__getitem__)
        ids, matrix = [ids[n] for n in order], matrix[order]
    with contextlib.suppress(OSError):
        folder.mkdir(exist_ok=True)
        for suffix, data in (
            (".f32", matrix.astype("<f4", copy=False).tobytes()),
            (".ids", "\n".join(ids).encode()),
        ):
            tmp = folder / f"{stem}{suffix}.{os.getpid()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, folder / f"{stem}{suffix}")
        prefix = stem.rsplit("-", 1)[0]
        for old in folder.glob(f"{prefix}-*"):
            if not old.name.startswith(stem):
                old.unlink(missing_ok=True)


def is_sorted(ids: Sequence[str]) -> bool:
    """Whether every id is below the next (~7 ms for 10^5 ids: a C loop, no list made)."""
    return all(map(operator.lt, ids, islice(ids, 1, None)))


class Positions:
    """Each id's row in a matrix of vectors. Where the ids are sorted (a vectors file's are: `save`
    writes them so) the first lookup bisects, so a cold question makes no dict of every id (45-60 ms
    at 10^5 entries, against ~3 ms for 600 bisections); from the second lookup on (a serving
    process's next questions), or where the ids are not sorted, a dict answers."""

    def __init__(self, ids: list[str]) -> None:
        self._ids = ids
        self._by_id: dict[str, int] | None = None if is_sorted(ids) else self._dict()
        self._bisected = False

    def _dict(self) -> dict[str, int]:
        return dict(zip(self._ids, range(len(self._ids)), strict=True))

    def of(self, wanted: Sequence[str]) -> dict[str, int]:
        """{id: row} of the ids wanted that are in the matrix."""
        if self._by_id is None and self._bisected:
            self._by_id = self._dict()
        if self._by_id is not None:
            return {i: p for i in wanted if (p := self._by_id.get(i)) is not None}
        self._bisected = True
        ids, n, out = self._ids, len(self._ids), {}
        for i in wanted:
            p = bisect.bisect_left(ids, i)
            if p < n and ids[p] == i:
                out[i] = p
        return out


def database_file(store: Any) -> str | None:
    """The SQLite file a store's vectors files go beside (None: a database in memory, or not a file)."""
    path = getattr(store, "path", "")
    if getattr(store, "dialect", "sqlite") != "sqlite" or not path or path == ":memory:":
        return None
    return str(path)


def drop(db: str, tree: str) -> int:
    """Remove every vectors file of `tree` (each embedder, each content): the tree was deleted.
    Returns the number of files removed; a file that cannot be removed stays (it is never read for
    another tree: its name holds the tree's key)."""
    folder = Path(f"{db}.vectors")
    removed = 0
    for old in folder.glob(f"{_key('tree', tree)}-*"):
        with contextlib.suppress(OSError):
            old.unlink()
            removed += 1
    return removed
