"""The `jobs` table's SQL: queue, claim under a lease, heartbeat, progress, end (the logic that uses
it, the worker loop and the heartbeat thread, is `knowtree.server.jobs`).

Claiming is one write transaction on both backends:

* SQLite: `BEGIN IMMEDIATE` (the store's `transaction()`) takes the database's one write lock, so
  the candidate rows read inside it cannot be claimed by anyone else before the conditional UPDATE.
* PostgreSQL: `SELECT … FOR UPDATE SKIP LOCKED` locks the candidate rows for this transaction and
  skips rows another worker is claiming right now, so many workers claim different jobs at once
  without waiting on each other; the UPDATE repeats the claim's condition all the same.

Why not a job-queue library (procrastinate, the maintained PostgreSQL queue): it runs on PostgreSQL
only, and SQLite stays the default store; our jobs table already has what it would add (leases
renewed by a heartbeat, takeover after expiry, attempts, idempotency keys, a cancel flag, progress
that every replica reads); and procrastinate keeps its own tables and worker loop, so a job's
progress, cancel and lease would live in two places. `FOR UPDATE SKIP LOCKED` is the mechanism it
uses itself.

Connections: the sqlite3 subset with qmark placeholders (the PostgreSQL store's wrapper rewrites them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from knowtree.store.protocol import SQLStore

COLUMNS = (
    "id, tenant, kind, tree, params_json, state, progress_json, report_json, error, cancel_requested,"
    " attempts, created, updated, owner, lease_until, idem_key"
)
#: a job a worker may claim: queued, or running under a lease that has expired (or never had one:
#: a row from before leases)
_CLAIMABLE = "(state = 'queued' OR (state = 'running' AND (lease_until IS NULL OR lease_until < ?)))"


def _dialect(store: SQLStore) -> str:
    return str(getattr(store, "dialect", "sqlite"))


def insert_job(
    store: SQLStore,
    job_id: str,
    tenant: str,
    kind: str,
    tree: str,
    params: dict[str, Any],
    now: str,
    idem_key: str | None,
) -> str:
    """Queue a job; with `idem_key`, the id of the tenant's job queued with that key before (none
    is inserted then)."""
    with store.transaction() as c:
        if idem_key is not None:
            row = c.execute(
                "SELECT id FROM jobs WHERE tenant = ? AND idem_key = ? AND kind = ? AND tree = ?"
                " ORDER BY created LIMIT 1",
                (tenant, idem_key, kind, tree),
            ).fetchone()
            if row is not None:
                return str(row[0])
        c.execute(
            f"INSERT INTO jobs({COLUMNS}) VALUES"
            " (?, ?, ?, ?, ?, 'queued', '{}', NULL, NULL, 0, 0, ?, ?, NULL, NULL, ?)",
            (job_id, tenant, kind, tree, json.dumps(params), now, now, idem_key),
        )
    return job_id


def job_row(store: SQLStore, job_id: str) -> tuple | None:
    rows = store.query(f"SELECT {COLUMNS} FROM jobs WHERE id = ?", (job_id,))
    return rows[0] if rows else None


def job_rows(store: SQLStore, tenant: str | None, limit: int) -> list[tuple]:
    sql = f"SELECT {COLUMNS} FROM jobs"
    args: tuple[object, ...] = ()
    if tenant is not None:
        sql += " WHERE tenant = ?"
        args = (tenant,)
    return store.query(sql + " ORDER BY created DESC, id LIMIT ?", (*args, limit))


def unfinished_params(store: SQLStore) -> list[dict[str, Any]]:
    """The parameters of the jobs still queued or running."""
    rows = store.query("SELECT params_json FROM jobs WHERE state IN ('queued', 'running')")
    return [json.loads(raw) for (raw,) in rows]


def claim_job(
    store: SQLStore,
    owner: str,
    *,
    now: float,
    lease_seconds: float,
    stamp: str,
    owner_gone: Callable[[str | None], bool],
) -> str | None:
    """Give `owner` the oldest claimable job (queued, or running under an expired lease or owned by
    a process `owner_gone` says is dead); returns its id, or None. A running job whose owner died
    after a cancel was asked for is marked cancelled on the way."""
    pending = store.query("SELECT state, owner, lease_until FROM jobs WHERE state IN ('queued', 'running')")
    gone = {o for s, o, lease in pending if s == "running" and lease is not None and lease >= now and owner_gone(o)}
    if not any(s == "queued" or lease is None or lease < now for s, _, lease in pending) and not gone:
        return None  # nothing to claim: no write lock taken (workers poll twice a second)
    candidates = f"{_CLAIMABLE}"
    args: list[object] = [now]
    if gone:
        candidates = f"({_CLAIMABLE} OR (state = 'running' AND owner IN ({', '.join('?' * len(gone))})))"
        args.extend(sorted(gone))  # type: ignore[arg-type]
    select = f"SELECT id, state, owner, cancel_requested FROM jobs WHERE {candidates} ORDER BY created, id"
    if _dialect(store) == "postgresql":
        select += " FOR UPDATE SKIP LOCKED"  # rows another worker is claiming now are skipped
    with store.transaction() as c:
        for job_id, state, old_owner, cancel in c.execute(select, args).fetchall():
            condition, cond_args = _CLAIMABLE, [now]
            if state == "running" and old_owner in gone:
                condition = f"({_CLAIMABLE} OR (state = 'running' AND owner = ?))"
                cond_args.append(old_owner)
            if state == "running" and cancel:  # its owner died after a cancel: done with it
                c.execute(
                    "UPDATE jobs SET state = 'cancelled', owner = NULL, lease_until = NULL,"
                    f" error = 'cancelled on request', updated = ? WHERE id = ? AND {condition}",
                    (stamp, job_id, *cond_args),
                )
                continue
            claimed = c.execute(
                "UPDATE jobs SET state = 'running', owner = ?, lease_until = ?, attempts = attempts + 1,"
                f" updated = ? WHERE id = ? AND {condition}",
                (owner, now + lease_seconds, stamp, job_id, *cond_args),
            ).rowcount
            if claimed == 1:
                return str(job_id)
    return None


def renew_lease(store: SQLStore, job_id: str, owner: str, until: float) -> bool:
    with store.transaction() as c:
        return c.execute(
            "UPDATE jobs SET lease_until = ? WHERE id = ? AND owner = ? AND state = 'running'",
            (until, job_id, owner),
        ).rowcount == 1


def release_job(store: SQLStore, job_id: str, owner: str, stamp: str) -> bool:
    with store.transaction() as c:
        return c.execute(
            "UPDATE jobs SET state = 'queued', owner = NULL, lease_until = NULL, updated = ?"
            " WHERE id = ? AND owner = ? AND state = 'running'",
            (stamp, job_id, owner),
        ).rowcount == 1


def count_takeovers(store: SQLStore, now: float) -> int:
    return int(store.query(
        "SELECT COUNT(*) FROM jobs WHERE state = 'running' AND (lease_until IS NULL OR lease_until < ?)",
        (now,),
    )[0][0])


def write_progress(
    store: SQLStore, job_id: str, progress: dict[str, Any], stamp: str, owner: str | None
) -> tuple[bool, bool]:
    """(written, cancel requested); with `owner`, written only while that owner holds the job."""
    with store.transaction() as c:
        sql = "UPDATE jobs SET progress_json = ?, updated = ? WHERE id = ?"
        args: tuple[object, ...] = (json.dumps(progress), stamp, job_id)
        if owner is not None:
            sql += " AND owner = ? AND state = 'running'"
            args = (*args, owner)
        written = c.execute(sql, args).rowcount == 1
        row = c.execute("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return written, bool(row and row[0])


def cancel_flag(store: SQLStore, job_id: str) -> bool:
    rows = store.query("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,))
    return bool(rows and rows[0][0])


def finish_job(
    store: SQLStore,
    job_id: str,
    state: str,
    *,
    report: dict[str, Any] | None,
    error: str | None,
    stamp: str,
    owner: str | None,
) -> bool:
    sql = (
        "UPDATE jobs SET state = ?, report_json = ?, error = ?, owner = NULL, lease_until = NULL,"
        " updated = ? WHERE id = ?"
    )
    args: tuple[object, ...] = (state, json.dumps(report) if report is not None else None, error, stamp, job_id)
    if owner is not None:
        sql += " AND owner = ? AND state = 'running'"
        args = (*args, owner)
    with store.transaction() as c:
        return c.execute(sql, args).rowcount == 1


def cancel_job(store: SQLStore, job_id: str, stamp: str) -> None:
    """A queued job is cancelled at once, a running one flagged (its worker stops at its next step)."""
    with store.transaction() as c:
        c.execute(
            "UPDATE jobs SET state = 'cancelled', cancel_requested = 1, updated = ? WHERE id = ? AND state = 'queued'",
            (stamp, job_id),
        )
        c.execute(
            "UPDATE jobs SET cancel_requested = 1, updated = ? WHERE id = ? AND state = 'running'",
            (stamp, job_id),
        )


__all__ = [
    "COLUMNS", "cancel_flag", "cancel_job", "claim_job", "count_takeovers", "finish_job", "insert_job",
    "job_row", "job_rows", "release_job", "renew_lease", "unfinished_params", "write_progress",
]
