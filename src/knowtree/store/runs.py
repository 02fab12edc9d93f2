"""Runs that outlive their process, and a database another process keeps locked.

A run is recorded with the pid and host of the process doing it. A process killed with SIGKILL never
marks its run finished: the next run started in the database (and every `knowtree ledger`) finds
that its process is gone and calls the run 'interrupted' instead of leaving it 'running' forever.

A run is about a subject in a space: a tree (or memory) by its stored name, or a knowledge base
(`space="kb"`). Its label, shown by `knowtree ledger`, is the subject for a tree and `kb:NAME` for a
knowledge base; the subject and its owner (store/names.py) are columns of their own, and the server's
ledger selects by owner, never by a label's prefix.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from knowtree.errors import StoreError

SPACES = ("tree", "kb")


def run_label(space: str, subject: str | None) -> str | None:
    """What `knowtree ledger` shows a run as (its `tree` field): `NAME` for a tree, `kb:NAME` for a
    knowledge base."""
    if space not in SPACES:
        raise ValueError(f"a run is about one of {', '.join(SPACES)}, not {space!r}")
    if subject is None or space == "tree":
        return subject
    return f"{space}:{subject}"


def this_process() -> tuple[int, str]:
    return os.getpid(), socket.gethostname()


def process_alive(pid: int | None, host: str | None) -> bool:
    """Whether the process that recorded a run may still be running it. Runs recorded before pids
    were (pid NULL) count as gone; a run of another host is presumed alive (we cannot tell)."""
    if pid is None:
        return False
    if host != socket.gethostname():
        return True
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return False


def mark_interrupted(conn: Any, now: str) -> int:
    """Inside a write transaction: mark 'running' runs whose process is gone as 'interrupted'."""
    # in id order: concurrent writers (PostgreSQL) lock the rows they update in one order, no deadlock
    rows = conn.execute("SELECT id, pid, host FROM runs WHERE status = 'running' ORDER BY id").fetchall()
    gone = [(now, r[0]) for r in rows if not process_alive(r[1], r[2])]
    conn.executemany("UPDATE runs SET status = 'interrupted', finished = ? WHERE id = ?", gone)
    return len(gone)


def busy_error(path: str, exc: Exception, timeout: float) -> StoreError:
    """A one-line error for a database still locked after the busy timeout (others pass through)."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return StoreError(
            f"{path}: database is busy: another process held its write lock for over {timeout:.0f}s "
            "(see the ledger of runs for running builds); try again when it finishes, or raise "
            "KNOWTREE_BUSY_TIMEOUT"
        )
    return StoreError(f"{path}: database error ({text})")
