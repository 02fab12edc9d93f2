"""What a knowtree database file must be before it is opened for writing, and `knowtree check`.

Before the store connects, `preflight` looks at the file without changing it (its header, then a
read-only connection): an empty file, a file that is not SQLite, another program's SQLite database
and a damaged file are refused with one line naming the file. Only a missing file, an SQLite file
with no tables, or a knowtree database (marked with `APPLICATION_ID`, or an older knowtree database
recognised by its tables) is opened. `full_check` is the thorough version (`PRAGMA integrity_check`
plus the full-text index's own check) behind `knowtree check`.

How much of the file `preflight` reads is its `check` level (`CHECKS`): "quick" runs
`PRAGMA quick_check` over every page (0.1 s per ~30 MB of trees, measured), "fast" only what a file
of any size allows in milliseconds (the header against the file's size, the schema, the page and
freelist counts, and `quick_check` of the small tables a server writes first: trees, jobs, keys),
"full" is `full_check`. "auto", a library's or the CLI's default, is quick up to
`QUICK_CHECK_MAX_BYTES` and fast above; `knowtree serve` checks "quick" whatever the size
(`--check`), so a server never writes into a database that fails SQLite's check.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from knowtree.errors import StoreError

#: `PRAGMA application_id` of every knowtree database: the bytes "KnTr".
APPLICATION_ID = 0x4B6E5472
#: files up to this size get `PRAGMA quick_check` on every open (about 0.1 s per 30 MB here, measured);
#: larger ones the fast check ("auto"; `knowtree serve` checks them whole, `knowtree check` thoroughly)
QUICK_CHECK_MAX_BYTES = 128 * 1024 * 1024
Check = Literal["auto", "fast", "quick", "full"]
CHECKS: tuple[Check, ...] = ("auto", "fast", "quick", "full")
_RANK = {"fast": 1, "quick": 2, "full": 3}
#: the small tables the fast check reads whole (what a server reads and writes first)
_CORE_TABLES = ("trees", "jobs", "tenants", "api_keys")
_MAGIC = b"SQLite format 3\x00"
_OUR_TABLES = frozenset({"trees", "nodes", "llm_cache", "runs"})
_DAMAGE_WORDS = ("malformed", "corrupt", "not a database", "disk image")  # in SQLite's messages about damage


#: files this process holds open through a store (by device and inode), with how many stores hold each
_HELD: dict[tuple[int, int], int] = {}
_HELD_LOCK = threading.Lock()


def _file_key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def hold(path: str) -> tuple[int, int] | None:
    """Record that a store of this process has `path` open (`release` undoes it); see `held`."""
    key = _file_key(path) if path != ":memory:" else None
    if key is not None:
        with _HELD_LOCK:
            _HELD[key] = _HELD.get(key, 0) + 1
    return key


def release(key: tuple[int, int] | None) -> None:
    if key is None:
        return
    with _HELD_LOCK:
        left = _HELD.get(key, 0) - 1
        if left > 0:
            _HELD[key] = left
        else:
            _HELD.pop(key, None)


def held(path: str) -> bool:
    """Whether this process already has the file open: through a store, or (Linux) any descriptor.

    Then `preflight` must not open and close the file itself: closing any descriptor of a file drops
    every POSIX lock the process holds on it, SQLite's included (sqlite.org/howtocorrupt.html, 2.2).
    A connection without its shared lock looks absent to other processes, and the next one to close
    the database deletes the live WAL file under it (measured: a second store opened in the same
    process, then `sqlite3 FILE "select 1"` from a shell, and the first store's later writes went to
    a deleted file)."""
    key = _file_key(path)
    if key is None:
        return False
    with _HELD_LOCK:
        if _HELD.get(key):
            return True
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        return False
    for entry in fds.iterdir():
        try:
            st = os.stat(entry)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == key:
            return True
    return False


class DamagedDatabaseError(StoreError):
    """The file is a knowtree database whose pages fail SQLite's checks: nothing is written to it."""


class ForeignDatabaseError(StoreError):
    """The file is not a knowtree database (not SQLite, empty, or another program's): left untouched."""


#: files this process found sound, by (device, inode, size, mtime, its WAL's size and mtime), with
#: the best check they passed: opening the file again after a server's own check does not repeat it
_PASSED: dict[tuple[object, ...], int] = {}


def _state(path: str) -> tuple[object, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    try:
        wal = os.stat(f"{path}-wal")
        wal_state: tuple[int, int] = (wal.st_size, wal.st_mtime_ns)
    except OSError:
        wal_state = (-1, -1)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, *wal_state)


def preflight(path: str, check: Check = "auto") -> bool:
    """Check the file at `path` before opening it; returns True when it is new (absent or no tables).

    `check`: how much of the file to read (see the module's text; "full" adds `full_check`).
    Raises `ForeignDatabaseError` or `DamagedDatabaseError` with a one-line message; never writes.
    """
    if path == ":memory:" or path.startswith("file:"):
        return True
    if path.lower().startswith(("postgresql://", "postgres://")):  # no file: checked by opening.check_target
        return False
    p = Path(path)
    if not p.exists():
        return True
    if p.is_dir():
        raise ForeignDatabaseError(f"{path}: is a directory, not a knowtree database file")
    if held(path):  # checked when this process opened it; reading it now would drop SQLite's locks
        return False
    size = p.stat().st_size
    if size == 0:
        raise ForeignDatabaseError(
            f"{path}: empty file (0 bytes), not a knowtree database; delete it to start a new one, "
            "or choose another --db"
        )
    try:
        with open(p, "rb") as f:
            header = f.read(100)
    except OSError as exc:
        raise StoreError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    if not header.startswith(_MAGIC):
        raise ForeignDatabaseError(
            f"{path}: not a SQLite database (knowtree leaves it untouched); choose another --db"
        )
    if len(header) < 100:
        raise DamagedDatabaseError(f"{path}: damaged database (truncated header, {size} bytes)")
    header_id = int.from_bytes(header[68:72], "big")
    if header_id not in (0, APPLICATION_ID):  # refused before any connection touches the file
        raise ForeignDatabaseError(
            f"{path}: another program's SQLite database (application_id {header_id:#x}), "
            "not a knowtree database; knowtree leaves it untouched: choose another --db"
        )
    truncated = _truncated(header, size)
    if truncated and not Path(f"{path}-wal").exists():  # pages in a WAL file may not be in the main file yet
        raise DamagedDatabaseError(
            f"{path}: damaged database (truncated: {truncated}); nothing was written to it: "
            f"check it with knowtree.store.guard.full_check({path!r})"
        )
    level = check if check != "auto" else ("quick" if size <= QUICK_CHECK_MAX_BYTES else "fast")
    state = _state(path)
    if state is not None and _PASSED.get(state, 0) >= _RANK[level]:
        return False  # this process checked this very file state already (a server's own check)
    try:
        info = _inspect(path, level=level, size=size)
    except (sqlite3.DatabaseError, UnicodeDecodeError) as raised:
        exc = as_sqlite_error(raised) or raised
        raise DamagedDatabaseError(
            f"{path}: damaged database ({exc}); nothing was written to it: "
            f"check it with knowtree.store.guard.full_check({path!r})"
        ) from exc
    if info.application_id not in (0, APPLICATION_ID):
        raise ForeignDatabaseError(
            f"{path}: another program's SQLite database (application_id {info.application_id:#x}), "
            "not a knowtree database; knowtree leaves it untouched: choose another --db"
        )
    if info.application_id == 0 and info.tables and not set(info.tables) >= _OUR_TABLES:
        shown = ", ".join(sorted(info.tables)[:5]) + (", ..." if len(info.tables) > 5 else "")
        raise ForeignDatabaseError(
            f"{path}: another program's SQLite database (tables: {shown}), not a knowtree database; "
            "knowtree leaves it untouched: choose another --db"
        )
    if info.problems:
        raise DamagedDatabaseError(
            f"{path}: damaged database ({info.problems[0]}); nothing was written to it: "
            f"check it with knowtree.store.guard.full_check({path!r})"
        )
    if level == "full" and info.tables:
        report = full_check(path)
        if not report.ok:
            raise DamagedDatabaseError(
                f"{path}: damaged database ({report.problems[0]}); nothing was written to it"
            )
    if state is not None and info.tables and _state(path) == state:
        _PASSED[state] = max(_PASSED.get(state, 0), _RANK[level])
    return not info.tables


def _truncated(header: bytes, size: int) -> str:
    """The header's own page count against the file's size (valid when the header says it is)."""
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    valid = header[24:28] == header[92:96] and pages > 0
    if valid and page_size and size < pages * page_size:
        return f"{size:,} bytes, the header says {pages:,} pages of {page_size:,}"
    return ""


@dataclass
class _Info:
    application_id: int
    tables: list[str]
    problems: list[str] = field(default_factory=list)


def _read_only(path: str) -> sqlite3.Connection:
    uri = Path(os.path.abspath(path)).as_uri() + "?mode=ro"
    return sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5.0)


def _inspect(path: str, *, level: str, size: int) -> _Info:
    conn = _read_only(path)
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        problems: list[str] = []
        if app_id in (0, APPLICATION_ID) and (app_id or set(tables) >= _OUR_TABLES):
            if level == "fast":
                problems = _fast_problems(conn, tables, size, path)
            else:
                rows = [r[0] for r in conn.execute("PRAGMA quick_check(3)")]
                problems = [_one_line(r) for r in rows if r != "ok"]
        return _Info(app_id, tables, problems)
    finally:
        conn.close()


def _fast_problems(conn: sqlite3.Connection, tables: list[str], size: int, path: str) -> list[str]:
    """What a file of any size allows in milliseconds: the page and freelist counts against the
    file's size, and `quick_check` of the small core tables (their b-trees, page by page)."""
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    problems = []
    if pages * page_size > size and not os.path.exists(f"{path}-wal"):
        problems.append(f"{pages:,} pages of {page_size:,} bytes in a file of {size:,} bytes")
    if not 0 <= free < max(pages, 1):
        problems.append(f"freelist of {free:,} pages in a database of {pages:,}")
    for table in (t for t in _CORE_TABLES if t in tables):
        rows = [r[0] for r in conn.execute(f"PRAGMA quick_check('{table}')")]
        problems += [f"{table}: {_one_line(r)}" for r in rows if r != "ok"]
    return problems


def mark(conn: sqlite3.Connection) -> None:
    """Stamp a knowtree database with `APPLICATION_ID` (new ones, and older ones on first open)."""
    if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")


@dataclass
class CheckReport:
    path: str
    problems: list[str]
    trees: int = 0
    pages: int = 0
    #: what was checked, as `knowtree check` says it
    checked: str = "integrity and full-text index checked"

    @property
    def ok(self) -> bool:
        return not self.problems


def full_check(path: str) -> CheckReport:
    """`knowtree check`: the header checks, `PRAGMA integrity_check` and the FTS5 index's integrity
    check, read-only (the FTS check runs in a transaction that is rolled back). A PostgreSQL URL gets
    the checks that apply there (`knowtree.store.opening.check_target`)."""
    if not Path(path).exists():
        raise StoreError(f"{path}: no such database file")
    try:
        _header_only(path)
    except StoreError as exc:
        return CheckReport(path, [str(exc)])
    problems: list[str] = []
    trees = pages = 0
    try:
        conn = _read_only(path)
    except sqlite3.Error as exc:
        return CheckReport(path, [f"{path}: cannot be opened ({exc})"])
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id not in (0, APPLICATION_ID):
            problems.append(f"application_id is {app_id:#x}, not knowtree's {APPLICATION_ID:#x}")
        rows = [r[0] for r in conn.execute("PRAGMA integrity_check(20)")]
        problems += [f"integrity_check: {_one_line(r)}" for r in rows if r != "ok"]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        try:
            trees = conn.execute("SELECT COUNT(*) FROM trees").fetchone()[0]
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            problems.append(f"trees table: {as_sqlite_error(exc) or exc}")
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        problems.append(f"integrity_check: {as_sqlite_error(exc) or exc}")
    finally:
        conn.close()
    if not problems:
        problems += _fts_check(path)
    return CheckReport(path, problems, trees=trees, pages=pages)


def _header_only(path: str) -> None:
    p = Path(path)
    if p.stat().st_size == 0:
        raise ForeignDatabaseError(f"{path}: empty file (0 bytes), not a knowtree database")
    with open(p, "rb") as f:
        if not f.read(16).startswith(_MAGIC):
            raise ForeignDatabaseError(f"{path}: not a SQLite database")


def _fts_check(path: str) -> list[str]:
    """FTS5's 'integrity-check' command is written as an INSERT: run it in a read-write connection
    inside a transaction that is always rolled back (it changes nothing either way)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    try:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%fts5%'"
            )
        ]
        out = []
        for name in names:
            conn.execute("BEGIN")
            try:
                conn.execute(f"INSERT INTO {name}({name}) VALUES ('integrity-check')")
            except sqlite3.DatabaseError as exc:
                out.append(f"full-text index {name}: {exc}")
            finally:
                conn.execute("ROLLBACK")
        return out
    finally:
        conn.close()


def as_sqlite_error(exc: BaseException) -> sqlite3.DatabaseError | None:
    """`exc` as the SQLite error it stands for, or None when it is not one. SQLite's message about a
    damaged schema can quote the damaged bytes (`malformed database schema (<garbage>)`); Python's
    sqlite3 decodes messages as strict UTF-8 and then raises `UnicodeDecodeError` instead of the
    `DatabaseError`. Such an error becomes the `DatabaseError` with the bytes replaced, so it is
    reported like any other damage (one line naming the file) instead of a traceback."""
    if isinstance(exc, sqlite3.DatabaseError):
        return exc
    if isinstance(exc, UnicodeDecodeError) and isinstance(exc.object, bytes):
        text = exc.object.decode("utf-8", "replace")
        if any(w in text for w in _DAMAGE_WORDS):
            return sqlite3.DatabaseError(text)
    return None


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


def describe_sqlite_error(exc: Exception) -> str:
    """One line for an SQLite error that escaped the store's own checks (the CLI prints it)."""
    text = str(exc)
    if any(w in text for w in _DAMAGE_WORDS):
        return (
            f"the database is damaged ({text}): check it with knowtree.store.guard.full_check"
            " (the file is left as it is)"
        )
    if "locked" in text or "busy" in text:
        return f"the database is busy ({text}): another process holds its write lock; try again later"
    return f"database error: {text}"
