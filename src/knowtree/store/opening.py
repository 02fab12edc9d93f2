"""`open_store(target)`: the store a `--db` / `KNOWTREE_DB` / settings value names — a
`postgresql://` (or `postgres://`) URL opens a `PostgresStore`, anything else the SQLite file
(`SQLiteStore`, ":memory:" included)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from knowtree.store.dialect import is_url
from knowtree.store.protocol import SQLStore

#: the test suite's PostgreSQL mode only (tests/conftest.py, KNOWTREE_TEST_BACKEND=postgresql): maps a
#: file target to the URL of a database standing in for it (None: open the file)
redirect: Callable[[str], str | None] | None = None


def open_store(target: str | Path, **opts: Any) -> SQLStore:
    """Open the store `target` names; `opts` go to the store (`busy_timeout`, and `pool_size` for
    PostgreSQL)."""
    if redirect is not None and not is_url(target):
        target = redirect(str(target)) or target
    if is_url(target):
        from knowtree.store.postgres import PostgresStore

        return PostgresStore(str(target), **opts)
    from knowtree.store.sqlite import SQLiteStore

    opts.pop("pool_size", None)
    return SQLiteStore(target, **opts)
