"""Issue 13, part A: damaged, foreign, empty and busy database files; runs killed mid-way (items 8, 9)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import paragraphs
from knowtree.cli.app import app
from knowtree.errors import StoreError
from knowtree.store import SQLiteStore


@pytest.fixture
def cli() -> CliRunner:
    return CliRunner()


def md5(path: str | Path) -> str:
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def one_line_error(result, *words: str) -> None:
    assert result.exit_code != 0, result.stdout
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    for w in words:
        assert w in lines[0], lines[0]


def build(cli: CliRunner, db: str = "kb.db", *extra: str) -> None:
    Path("doc.md").write_text(paragraphs(40), encoding="utf-8")
    result = cli.invoke(
        app, ["build", "doc.md", "--db", db, "--tree", "t", "--model", "keyword", "-q", *extra]
    )
    assert result.exit_code == 0, (result.stdout, result.stderr)


@pytest.mark.sqlite_only
def test_new_database_is_marked_and_an_older_one_still_opens(cli: CliRunner) -> None:
    from knowtree.store.guard import APPLICATION_ID

    build(cli)
    with sqlite3.connect("kb.db") as c:
        assert c.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        c.execute("PRAGMA application_id = 0")  # as written before this version
    result = cli.invoke(app, ["trees", "--db", "kb.db"])
    assert result.exit_code == 0 and result.stdout.startswith("t\t")


@pytest.mark.sqlite_only
def test_foreign_sqlite_file_is_left_untouched(cli: CliRunner) -> None:
    with sqlite3.connect("other.db") as c:
        c.execute("CREATE TABLE t(x)")
        c.execute("INSERT INTO t VALUES (1)")
    c.close()
    before = md5("other.db")
    for args in (["trees"], ["show", "t"], ["build", "doc.md", "--tree", "t", "--model", "keyword"]):
        Path("doc.md").write_text("Some text.\n", encoding="utf-8")
        result = cli.invoke(app, [*args, "--db", "other.db"])
        one_line_error(result, "other.db", "not a knowtree database")
    assert md5("other.db") == before and not Path("other.db-wal").exists()
    with sqlite3.connect("app.db") as c:  # marked by another program
        c.execute("PRAGMA application_id = 1234")
    c.close()
    one_line_error(cli.invoke(app, ["trees", "--db", "app.db"]), "application_id")


@pytest.mark.sqlite_only
def test_empty_and_non_sqlite_files_are_refused(cli: CliRunner) -> None:
    Path("empty.db").write_bytes(b"")
    one_line_error(cli.invoke(app, ["trees", "--db", "empty.db"]), "empty.db", "empty file")
    assert Path("empty.db").stat().st_size == 0
    Path("notes.db").write_text("just some notes\n" * 20)
    one_line_error(cli.invoke(app, ["trees", "--db", "notes.db"]), "notes.db", "not a SQLite database")


def damage(path: str) -> None:
    """Up to 200 KB of garbage over the middle of the file (after the schema pages)."""
    size = Path(path).stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 3)
        f.write(os.urandom(min(200_000, size // 3)))


@pytest.mark.sqlite_only
def test_damaged_database_gives_one_line_errors_and_is_never_written(cli: CliRunner) -> None:
    build(cli)
    with sqlite3.connect("kb.db") as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert os.path.getsize("kb.db") > 100_000
    c.close()
    damage("kb.db")
    before = md5("kb.db")
    Path("more.md").write_text("More text about the harbour.\n", encoding="utf-8")
    commands = [
        ["trees"],
        ["show", "t"],
        ["ask", "t", "Who keeps the lighthouse?", "--model", "keyword"],
        ["build", "more.md", "--tree", "t2", "--model", "keyword", "-q"],
        ["rm", "t"],
        ["ledger"],
    ]
    for args in commands:
        result = cli.invoke(app, [*args, "--db", "kb.db"])
        one_line_error(result, "kb.db", "damaged")
    assert md5("kb.db") == before
    check = cli.invoke(app, ["check", "--db", "kb.db"])
    assert check.exit_code == 3 and "integrity_check" in check.stderr
    assert md5("kb.db") == before


@pytest.mark.sqlite_only
def test_a_schema_damaged_into_bytes_that_are_not_utf8_is_a_one_line_error(cli: CliRunner) -> None:
    # SQLite quotes the damaged name in its message; Python's sqlite3 then raises UnicodeDecodeError
    # decoding it (found by the random damage above, 1 seed in ~10): still one line naming the file
    build(cli)
    with sqlite3.connect("kb.db") as c:
        c.execute("PRAGMA writable_schema = ON")
        c.execute(
            "UPDATE sqlite_master SET name = CAST(X'e2e8f54e' AS TEXT), sql = 'CREATE nonsense' "
            "WHERE rowid = (SELECT min(rowid) FROM sqlite_master WHERE type = 'index')"
        )
    c.close()
    raw = sqlite3.connect("kb.db")
    with pytest.raises(UnicodeDecodeError):  # what Python's sqlite3 does with the message
        raw.execute("SELECT name FROM sqlite_master").fetchall()
    raw.close()
    before = md5("kb.db")
    for args in (["trees"], ["ask", "t", "Who keeps the lighthouse?", "--model", "keyword"], ["ledger"]):
        one_line_error(cli.invoke(app, [*args, "--db", "kb.db"]), "kb.db", "damaged", "malformed database schema")
    check = cli.invoke(app, ["check", "--db", "kb.db"])
    assert check.exit_code == 3 and "malformed database schema" in check.stderr
    assert md5("kb.db") == before


def test_an_undecodable_message_is_the_sqlite_error_only_when_it_reads_as_one() -> None:
    from knowtree.store.guard import as_sqlite_error

    schema = UnicodeDecodeError("utf-8", b"malformed database schema (\xe2\xe8)", 27, 28, "invalid continuation byte")
    got = as_sqlite_error(schema)
    assert isinstance(got, sqlite3.DatabaseError) and str(got).startswith("malformed database schema (")
    other = UnicodeDecodeError("utf-8", b"caf\xe9 au lait", 3, 4, "invalid continuation byte")
    assert as_sqlite_error(other) is None and as_sqlite_error(ValueError("x")) is None


@pytest.mark.sqlite_only
def test_truncated_database_is_refused_by_its_header(cli: CliRunner) -> None:
    build(cli)
    with sqlite3.connect("kb.db") as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    for suffix in ("-wal", "-shm"):
        Path(f"kb.db{suffix}").unlink(missing_ok=True)
    size = os.path.getsize("kb.db")
    with open("kb.db", "r+b") as f:
        f.truncate(size - 3 * 4096)
    one_line_error(cli.invoke(app, ["trees", "--db", "kb.db"]), "kb.db", "damaged", "truncated")


@pytest.mark.sqlite_only
def test_check_passes_on_a_sound_database(cli: CliRunner) -> None:
    from knowtree.store.guard import full_check

    build(cli)
    result = cli.invoke(app, ["check", "--db", "kb.db"])
    assert result.exit_code == 0 and "ok (1 tree(s)" in result.stdout
    assert full_check("kb.db").ok


@pytest.mark.sqlite_only
def test_check_finds_a_broken_full_text_index(cli: CliRunner) -> None:
    from knowtree.store.guard import full_check

    build(cli)
    with sqlite3.connect("kb.db") as c:  # remove index rows behind FTS5's back
        c.execute("DELETE FROM nodes_fts_data WHERE id > 10")
    c.close()
    report = full_check("kb.db")
    assert not report.ok and any("full-text" in p for p in report.problems)


# -- item 9: a busy database, runs killed mid-way --------------------------------------------------
@pytest.mark.sqlite_only
def test_a_locked_database_is_a_one_line_error(cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    build(cli)
    holder = sqlite3.connect("kb.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        monkeypatch.setenv("KNOWTREE_BUSY_TIMEOUT", "0.3")
        Path("b.md").write_text("Another document.\n", encoding="utf-8")
        result = cli.invoke(
            app, ["build", "b.md", "--db", "kb.db", "--tree", "u", "--model", "keyword", "-q"]
        )
        one_line_error(result, "kb.db", "busy", "write lock")
        listed = cli.invoke(app, ["trees", "--db", "kb.db"])  # readers are not blocked
        assert listed.exit_code == 0 and listed.stdout.startswith("t\t")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def dead_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(proc.stdout)


@pytest.mark.sqlite_only
def test_killed_runs_show_as_interrupted(cli: CliRunner, tmp_path: Path) -> None:
    build(cli)
    store = SQLiteStore("kb.db")
    with sqlite3.connect("kb.db") as c:
        c.execute(
            "INSERT INTO runs(id, kind, tree, detail, status, started, pid, host)"
            " VALUES ('gone1', 'build', 't', '', 'running', '2020-01-01T00:00:00', ?, ?)",
            (dead_pid(), os.uname().nodename),
        )
        c.execute(
            "INSERT INTO runs(id, kind, tree, detail, status, started)"
            " VALUES ('old1', 'build', 't', '', 'running', '2020-01-01T00:00:00')"
        )
    c.close()
    shown = {r["id"]: r["status"] for r in store.runs(limit=50)}
    assert shown["gone1"] == "interrupted" and shown["old1"] == "interrupted"
    mine = store.start_run("ask", "t")  # this process is alive: its run stays 'running'
    rows = dict(store._query("SELECT id, status FROM runs"))
    assert rows["gone1"] == rows["old1"] == "interrupted" and rows[mine] == "running"
    store.close()
    out = cli.invoke(app, ["ledger", "--db", "kb.db", "--json"]).stdout
    assert "running" in {r["status"] for r in json.loads(out)}


def test_store_refuses_directly(tmp_path: Path) -> None:
    (tmp_path / "zero.db").write_bytes(b"")
    with pytest.raises(StoreError, match="empty file"):
        SQLiteStore(tmp_path / "zero.db")


def test_a_second_store_on_the_same_file_keeps_the_first_ones_wal_safe(tmp_path: Path) -> None:
    # Reading the header with open()/close() while a store of this process had the file open dropped
    # the process's POSIX locks: another process closing the database then deleted the live WAL file.
    import subprocess
    import sys

    from knowtree.store.sqlite import SQLiteStore

    path = tmp_path / "kb.db"
    first = SQLiteStore(path)
    first.query("SELECT 1")
    second = SQLiteStore(path)
    other = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT count(*) FROM sqlite_master').fetchone(); c.close()"
    )
    subprocess.run([sys.executable, "-c", other, str(path)], check=True)
    assert (tmp_path / "kb.db-wal").exists()
    second.close()
    subprocess.run([sys.executable, "-c", other, str(path)], check=True)
    assert (tmp_path / "kb.db-wal").exists()  # the first store is still open
    first.close()
