"""A damaged database over the size the open-time quick check covers (128 MB) is refused by
`knowtree serve` (which checks every page, whatever the size) and by the fast check where the damage
is in the tables a server writes first; the file is left as it was."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from knowtree.store import SQLiteStore
from knowtree.store.guard import QUICK_CHECK_MAX_BYTES, DamagedDatabaseError, preflight

HERE = Path(__file__).parent
MB = 1024 * 1024


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sound knowtree database of ~135 MB (a table of 1 MB blobs beside the store's tables)."""
    path = tmp_path_factory.mktemp("big") / "big.db"
    SQLiteStore(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, b BLOB)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO blobs(b) VALUES (zeroblob(?))", [(MB,)] * 135)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert path.stat().st_size > QUICK_CHECK_MAX_BYTES
    return path


def _damaged(big_db: Path, tmp_path: Path, page: str) -> Path:
    """A copy of `big_db` with 4 bytes of one page overwritten: "middle" (a page of the blobs) or
    "trees" (the root page of the trees table)."""
    path = tmp_path / "damaged.db"
    shutil.copyfile(big_db, path)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    count = conn.execute("PRAGMA page_count").fetchone()[0]
    number = count // 2 if page == "middle" else conn.execute(
        "SELECT rootpage FROM sqlite_master WHERE name = 'trees'").fetchone()[0]
    conn.close()
    with open(path, "r+b") as f:
        f.seek((number - 1) * page_size)
        f.write(b"\xff\xff\xff\xff")
    return path


def test_serve_refuses_a_damaged_database_over_128_mb(big_db: Path, tmp_path: Path) -> None:
    path = _damaged(big_db, tmp_path, "middle")
    before = (path.stat().st_size, path.stat().st_mtime_ns)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    try:
        out = subprocess.run(
            [sys.executable, "-c", "from knowtree.cli.app import main; main()", "serve", "--db", str(path),
             "--model", "keyword", "--port", "1"],  # port 1: a server that got past the check fails to bind
            env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("serve started on a damaged database")
    assert out.returncode == 3, out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "damaged database" in lines[0] and str(path) in lines[0], out.stderr
    assert (path.stat().st_size, path.stat().st_mtime_ns) == before
    wal = Path(f"{path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # nothing written (a read-only check leaves it empty)


def test_the_quick_and_full_checks_find_damage_anywhere_whatever_the_size(big_db: Path, tmp_path: Path) -> None:
    path = _damaged(big_db, tmp_path, "middle")
    started = time.perf_counter()
    with pytest.raises(DamagedDatabaseError, match="damaged database"):
        preflight(str(path), "quick")
    quick = time.perf_counter() - started
    with pytest.raises(DamagedDatabaseError, match="damaged database"):
        preflight(str(path), "full")
    assert quick < 5.0, quick
    preflight(str(big_db), "quick")  # the sound file passes


def test_the_fast_check_finds_damage_in_the_core_tables_in_milliseconds(big_db: Path, tmp_path: Path) -> None:
    from knowtree.store import guard

    guard._PASSED.clear()  # measure the check itself, not this process's memory of it
    started = time.perf_counter()
    preflight(str(big_db), "fast")
    fast = time.perf_counter() - started
    path = _damaged(big_db, tmp_path, "trees")
    with pytest.raises(DamagedDatabaseError, match="damaged database"):
        preflight(str(path), "auto")  # over 128 MB: auto is the fast check
    with pytest.raises(DamagedDatabaseError):
        SQLiteStore(path)  # a library open refuses it too
    assert fast < 0.5, fast


def test_a_truncated_big_file_fails_the_fast_check(big_db: Path, tmp_path: Path) -> None:
    path = tmp_path / "cut.db"
    shutil.copyfile(big_db, path)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 64 * 4096)
    with pytest.raises(DamagedDatabaseError, match="truncated"):
        preflight(str(path), "fast")
