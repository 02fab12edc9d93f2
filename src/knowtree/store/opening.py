"""`open_store(target)`: the store a `--db` / `KNOWTREE_DB` / settings value names — a
`postgresql://` (or `postgres://`) URL opens a `PostgresStore`, anything else the SQLite file
(`SQLiteStore`, ":memory:" included)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from knowtree.errors import NotFoundError
from knowtree.store.dialect import is_url
from knowtree.store.guard import CheckReport
from knowtree.store.protocol import SQLStore

#: the test suite's PostgreSQL mode only (tests/conftest.py, KNOWTREE_TEST_BACKEND=postgresql):
#: `redirect(file target, create)` gives the URL of the database standing in for that file, raises
#: NotFoundError when `create` is False and there is none yet, or returns None (open the file)
redirect: Callable[[str, bool], str | None] | None = None


def open_store(target: str | Path, *, create: bool = True, **opts: Any) -> SQLStore:
    """Open the store `target` names; `create=False`: a SQLite file must exist already (a URL's
    database always does). `opts` go to the store (`busy_timeout`; `pool_size` for PostgreSQL)."""
    if redirect is not None and not is_url(target):
        target = redirect(str(target), create) or target
    if is_url(target):
        from knowtree.store.postgres import PostgresStore

        return PostgresStore(str(target), **opts)
    if not create and str(target) != ":memory:" and not Path(target).exists():
        raise NotFoundError(f"no knowtree database at {target}: build a tree first (KnowTree.build)")
    from knowtree.store.sqlite import SQLiteStore

    opts.pop("pool_size", None)
    return SQLiteStore(target, **opts)


def check_target(target: str) -> CheckReport:
    """`knowtree check` / `knowtree doctor`: the thorough read-only check of a SQLite file
    (`guard.full_check`), or of a PostgreSQL database (`postgres.check`)."""
    if is_url(target):
        from knowtree.store.postgres import check

        return check(target)
    from knowtree.store.guard import full_check

    return full_check(target)


def store_kind(target: str) -> str:
    """"PostgreSQL" or "SQLite": what `knowtree doctor` names the store."""
    return "PostgreSQL" if is_url(target) else "SQLite"
