"""`knowtree build --executor ray` on a local Ray cluster (a head and one more worker node, one CPU and
a small object store each): the same tree as a one-process build (node ids, metadata, texts, index
rows), and a Ray worker process killed (-9) mid-build: the build finishes, no finished model call is
made again, the tree is the same. Selected with `-m ray`; they run in CI (ray is in the [ray] extra)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kb_helpers import cli_options, kb_content, write_kb_inputs
from knowtree.store import SQLiteStore
from server_helpers import free_port, serve_cli, stop

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

SRC = Path(__file__).resolve().parents[1] / "src"
BIN = Path(sys.executable).parent


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
           "RAY_ADDRESS": "", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("KNOWTREE_MODEL", None)
    return env


def _ray(*args: str) -> None:
    subprocess.run([str(BIN / "ray"), *args], env=_env(), check=True, capture_output=True, timeout=180)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A head and one worker node on this machine, one CPU and 80 MB of object store each, under a
    Ray temporary folder of their own; stopped after, and only they: `ray stop` would stop every Ray
    cluster on the machine (a benchmark's or a user's running beside the tests)."""
    port = free_port()
    # short: Ray's socket paths under it must fit a Unix socket's 107 bytes
    temp = Path(tempfile.mkdtemp(prefix="ktray", dir="/tmp"))
    bounds = ("--num-cpus", "1", "--object-store-memory", "80000000", "--memory", "500000000",
              "--temp-dir", str(temp))
    try:
        _ray("start", "--head", "--port", str(port), "--include-dashboard=false", "--disable-usage-stats", *bounds)
        _ray("start", "--address", f"127.0.0.1:{port}", *bounds)
        yield f"127.0.0.1:{port}"
    finally:
        stop_processes_naming(str(temp))
        shutil.rmtree(temp, ignore_errors=True)


def stop_processes_naming(marker: str, grace: float = 15.0) -> list[int]:
    """End every process whose command line or open files name `marker` (the test cluster's
    temporary folder: the GCS and raylets name it in their arguments; the dashboard and runtime-env
    agents rename themselves `ray::…` but keep their logs there open, and outlive their raylet),
    SIGTERM first, SIGKILL after `grace` seconds; the Ray worker processes exit with their raylet.
    Returns the pids signalled."""
    def names(entry: Path) -> bool:
        if marker.encode() in (entry / "cmdline").read_bytes():
            return True
        for fd in (entry / "fd").iterdir():
            with contextlib.suppress(OSError):  # closed meanwhile
                if marker in os.readlink(fd):
                    return True
        return False

    def naming() -> list[int]:
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
                if names(entry):
                    pids.append(int(entry.name))
        return pids

    signalled = left = naming()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while (left := naming()) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not left:
            break
    return signalled


def _corpus(root: Path, docs: int = 24) -> Path:
    rnd = random.Random(3)
    words = "alpha beta gamma delta budget launch review ticket owner deploy cache index".split()
    corpus = root / "corpus"
    corpus.mkdir(exist_ok=True)
    for i in range(docs):
        body = " ".join(rnd.choice(words) for _ in range(900))
        (corpus / f"doc{i:03d}.md").write_text(f"# Doc {i}\n\n{body}\n\nOwner of item {i} is person {i * 7}.\n")
    return corpus


def _cli(root: Path, log_name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`knowtree ARGS` of this checkout in `root`, its output appended to root/LOG_NAME."""
    log = open(root / log_name, "ab")  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-c", "from knowtree.cli.app import main; main()", *args],
        env=env or _env(), stdout=log, stderr=log, cwd=root,
    )


def _build(root: Path, db: str, tree: str, *extra: str, model: str = "slow:0.02") -> subprocess.Popen[bytes]:
    return _cli(root, f"{tree}.log", "build", str(root / "corpus"), "--tree", tree, "--yes", "--db", str(root / db),
                "--model", model, "--quiet", *extra)


def _finished(proc: subprocess.Popen[bytes], root: Path, tree: str, timeout: float = 300) -> None:
    assert proc.wait(timeout) == 0, (root / f"{tree}.log").read_text()[-2000:]


def _tree(root: Path, db: str, tree: str) -> tuple[list[tuple[str, str, str]], list[tuple]]:
    """The tree as `knowtree show --json` prints it (id, metadata, text per node), and its index rows."""
    out = subprocess.run(
        [sys.executable, "-c", "from knowtree.cli.app import main; main()", "show", tree, "--db", str(root / db),
         "--json"], env=_env(), capture_output=True, text=True, check=True, timeout=120,
    ).stdout
    nodes = sorted((n["id"], json.dumps(n.get("meta"), sort_keys=True), n.get("text", ""))
                   for n in json.loads(out)["nodes"])
    store = SQLiteStore(root / db)
    try:
        cols = [r[1] for r in store.query("PRAGMA table_info(tree_index)") if r[1] not in ("tree", "rid")]
        index = sorted(store.query(f"SELECT {', '.join(cols)} FROM tree_index WHERE tree = ?", (tree,)))
    finally:
        store.close()
    return nodes, index


def _ledger(root: Path, db: str) -> dict[str, Any]:
    store = SQLiteStore(root / db)
    try:
        repeated = store.query("SELECT key FROM llm_calls GROUP BY key HAVING SUM(1 - cached) > 1")
        made = store.query("SELECT COUNT(*) FROM llm_calls WHERE cached = 0")[0][0]
        cached = store.query("SELECT COUNT(*) FROM llm_calls WHERE cached = 1")[0][0]
        dup = store.query("SELECT COUNT(*) - COUNT(DISTINCT tree || ':' || id) FROM nodes")[0][0]
    finally:
        store.close()
    return {"repeated": repeated, "made": made, "cached": cached, "duplicated": dup}


def test_a_ray_build_makes_the_one_process_tree(tmp_path: Path, cluster: str) -> None:
    _corpus(tmp_path)
    _finished(_build(tmp_path, "one.db", "one"), tmp_path, "one")
    _finished(_build(tmp_path, "two.db", "two", "--executor", "ray", "--ray-address", cluster), tmp_path, "two")
    one, two = _tree(tmp_path, "one.db", "one"), _tree(tmp_path, "two.db", "two")
    assert one[0] and one[0] == two[0]  # same ids, metadata and texts
    assert one[1] and one[1] == two[1]  # same index rows
    ledger = _ledger(tmp_path, "two.db")
    assert ledger["made"] == len(one[0]) and ledger["repeated"] == [] and ledger["duplicated"] == 0


TREE_TASKS = ("leaf_call", "branch_call")  # the task names of a tree build's calls (`RayFanout.map`)
KB_TASKS = ("context_sentences", "assign_batch", "expand_batch", "solve_item")  # a KB build's


def _task_processes(names: tuple[str, ...] = TREE_TASKS) -> list[int]:
    """The Ray worker processes running a task of one of `names` now."""
    titles = tuple(f"ray::{name}".encode() for name in names)
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                title = (proc / "cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if title.startswith(titles):
                pids.append(int(proc.name))
    return pids


def test_a_killed_ray_worker_repeats_no_call_and_the_tree_is_the_same(tmp_path: Path, cluster: str) -> None:
    _corpus(tmp_path)
    _finished(_build(tmp_path, "one.db", "one", model="slow:0.3"), tmp_path, "one")
    build = _build(tmp_path, "two.db", "two", "--executor", "ray", "--ray-address", cluster, "--concurrency", "2",
                   model="slow:0.3")
    killed = None
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and build.poll() is None:
            busy = _task_processes()
            if busy and (tmp_path / "two.db").exists() and _ledger(tmp_path, "two.db")["made"] >= 6:
                killed = busy[0]
                os.kill(killed, signal.SIGKILL)
                break
            time.sleep(0.1)
        assert killed is not None, "no Ray task process was seen running"
        _finished(build, tmp_path, "two")
    finally:
        if build.poll() is None:
            build.kill()
    ledger = _ledger(tmp_path, "two.db")
    one, two = _tree(tmp_path, "one.db", "one"), _tree(tmp_path, "two.db", "two")
    assert one[0] == two[0] and one[1] == two[1]
    assert ledger["repeated"] == []  # every call the killed worker finished came from the cache after
    assert ledger["duplicated"] == 0
    assert ledger["made"] == len(one[0])  # each node's call made once, across the kill


def test_pdfs_read_by_ray_tasks_make_the_one_process_tree(tmp_path: Path, cluster: str) -> None:
    from pdf_maker import make_pdf

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(6):
        make_pdf(corpus / f"report{i}.pdf", [[f"Report {i} page {p}", f"Revenue grew {i * p} percent in region {p}."]
                                           for p in range(1, 4)])
    (corpus / "notes.md").write_text("# Notes\n\nThe owner of the budget is Ada.\n")
    args = ("--summaries", "none")
    _finished(_build(tmp_path, "one.db", "one", *args), tmp_path, "one")
    _finished(_build(tmp_path, "two.db", "two", *args, "--executor", "ray", "--ray-address", cluster), tmp_path, "two")
    one, two = _tree(tmp_path, "one.db", "one"), _tree(tmp_path, "two.db", "two")
    assert len(one[0]) > 7 and one[0] == two[0] and one[1] == two[1]


def _enrich(root: Path, db: str, tree: str, *extra: str) -> subprocess.Popen[bytes]:
    return _cli(root, f"{tree}.log", "enrich", tree, "--yes", "--db", str(root / db), "--model", "slow:0.02", "--quiet",
                *extra)


def test_an_enrich_on_ray_makes_the_one_process_metadata(tmp_path: Path, cluster: str) -> None:
    _corpus(tmp_path, docs=12)
    for db, tree in (("one.db", "one"), ("two.db", "two")):
        _finished(_build(tmp_path, db, tree, "--summaries", "none"), tmp_path, tree)
    _finished(_enrich(tmp_path, "one.db", "one"), tmp_path, "one")
    _finished(_enrich(tmp_path, "two.db", "two", "--executor", "ray", "--ray-address", cluster), tmp_path, "two")
    one, two = _tree(tmp_path, "one.db", "one"), _tree(tmp_path, "two.db", "two")
    assert one[0] == two[0] and one[1] == two[1]  # same metadata, same index rows after the enrich
    assert all(json.loads(meta).get("summary") for _, meta, _ in two[0])
    ledger = _ledger(tmp_path, "two.db")
    assert ledger["repeated"] == [] and ledger["made"] == _ledger(tmp_path, "one.db")["made"] > 0


def _job_on_a_ray_worker(root: Path, cluster: str, route: str, body: dict[str, Any], names: tuple[str, ...]) -> bool:
    """A job queued by a replica (`POST route` with `body`, on root/kb.db) and run by `KNOWTREE_EXECUTOR=ray
    knowtree worker`: whether a Ray task of one of `names` was seen running. Asserts the job is done."""
    import httpx

    port = free_port()
    api = serve_cli(root, port, "--no-worker", model="slow:0.02")
    env = {**_env(), "KNOWTREE_EXECUTOR": "ray", "KNOWTREE_RAY_ADDRESS": cluster}
    worker = _cli(root, "worker.log", "worker", "--db", str(root / "kb.db"), "--model", "slow:0.02", "--poll",
                  "0.1", env=env)
    base, seen, state = f"http://127.0.0.1:{port}", False, ""
    try:
        job = httpx.post(f"{base}{route}", json=body).json()
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            seen = seen or bool(_task_processes(names))
            state = httpx.get(f"{base}/v1/jobs/{job['id']}", timeout=10).json()["state"]
            if state in ("done", "failed", "cancelled"):
                break
            time.sleep(0.05)
    finally:
        stop(api, worker)
    assert state == "done", (root / "worker.log").read_text()[-2000:]
    return seen


def test_a_worker_with_the_ray_executor_runs_a_server_build_on_the_cluster(tmp_path: Path, cluster: str) -> None:
    """`KNOWTREE_EXECUTOR=ray knowtree worker`: a build job queued by a replica makes its model calls as
    Ray tasks (seen running), and the tree is the one a one-process CLI build makes."""
    _corpus(tmp_path, docs=12)
    _finished(_build(tmp_path, "one.db", "one"), tmp_path, "one")
    body = {"paths": [str(tmp_path / "corpus")]}
    assert _job_on_a_ray_worker(tmp_path, cluster, "/v1/trees/two/build", body, TREE_TASKS), (
        "no Ray task process ran the job's model calls"
    )
    one, two = _tree(tmp_path, "one.db", "one"), _tree(tmp_path, "kb.db", "two")
    assert one[0] == two[0] and one[1] == two[1]


def test_budget_caps_hold_for_the_whole_cluster(tmp_path: Path, cluster: str) -> None:
    """--max-calls on a Ray build counts every task's calls (the run's ledger), not each task's own:
    at most the cap plus the calls already in flight on the cluster's workers (2 here, concurrency 1)."""
    _corpus(tmp_path, docs=24)
    build = _build(tmp_path, "two.db", "two", "--executor", "ray", "--ray-address", cluster, "--concurrency", "1",
                   "--max-calls", "6")
    assert build.wait(300) == 1
    log = (tmp_path / "two.log").read_text()
    assert "budget reached" in log and "Traceback" not in log, log[-2000:]
    assert 6 <= _ledger(tmp_path, "two.db")["made"] <= 6 + 2
    # the rerun (no cap) finishes from where it stopped: the finished calls are cache hits
    _finished(_build(tmp_path, "two.db", "two"), tmp_path, "two")
    assert _ledger(tmp_path, "two.db")["repeated"] == []


def _kb_build(root: Path, name: str, *extra: str, model: str = "slow:0.02", themes: str = "model") -> subprocess.Popen[bytes]:
    """`knowtree kb build` of the synthetic audio KB (every stage makes calls) into root/NAME.db."""
    files = write_kb_inputs(root)
    return _cli(root, f"{name}.log", "kb", "build", "audio", "--issues", files["issues"], "--docs", files["docs"],
                "--attributes", files["attributes"], "--rules", files["rules"], "--embedder", "hash",
                "--db", str(root / f"{name}.db"), "--model", model, "--quiet", *cli_options(themes), *extra)


def _kb(root: Path, name: str) -> dict[str, list[Any]]:
    store = SQLiteStore(root / f"{name}.db")
    try:
        return kb_content(store, "audio")
    finally:
        store.close()


def _made(root: Path, name: str) -> Counter[str]:
    """How many times each call was made (not answered by the cache) in root/NAME.db."""
    store = SQLiteStore(root / f"{name}.db")
    try:
        return Counter(k for (k,) in store.query("SELECT key FROM llm_calls WHERE cached = 0 AND error IS NULL"))
    finally:
        store.close()


def test_a_kb_built_on_ray_is_the_one_process_kb(tmp_path: Path, cluster: str) -> None:
    _finished(_kb_build(tmp_path, "one"), tmp_path, "one")
    build = _kb_build(tmp_path, "two", "--executor", "ray", "--ray-address", cluster)
    seen: set[int] = set()
    while build.poll() is None:
        seen.update(_task_processes(KB_TASKS))
        time.sleep(0.05)
    _finished(build, tmp_path, "two")
    assert seen, "no Ray task process made the KB's calls"
    one, two = _kb(tmp_path, "one"), _kb(tmp_path, "two")
    assert one["issues"] and one["chunks"] and len(one["clusters"]) > 6
    assert one == two  # themes, clusters, issues and their links, solutions, chunk texts and contexts
    # the same calls (two tasks may make one call at once: the cache answers finished calls only)
    assert set(_made(tmp_path, "one")) == set(_made(tmp_path, "two"))


def test_an_interrupted_kb_build_on_ray_reruns_without_repeating_a_call(tmp_path: Path, cluster: str) -> None:
    """Ctrl-C in the middle of `kb build --executor ray`, then the same command again: it finishes the KB
    (the one a one-process build makes), and no call finished before the interruption is made again."""
    _finished(_kb_build(tmp_path, "one"), tmp_path, "one")
    args = ("--executor", "ray", "--ray-address", cluster)
    build = _kb_build(tmp_path, "two", *args, model="slow:0.2")
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and build.poll() is None:
            # tasks running: the driver has made the database (opening it while it does races its migration)
            if _task_processes(KB_TASKS) and sum(_made(tmp_path, "two").values()) >= 12:
                build.send_signal(signal.SIGINT)
                break
            time.sleep(0.1)
        assert build.wait(120) == 130, (tmp_path / "two.log").read_text()[-2000:]
    finally:
        if build.poll() is None:
            build.kill()
    while _task_processes(KB_TASKS) and time.monotonic() < deadline:  # the driver's tasks end with it
        time.sleep(0.1)
    before = _made(tmp_path, "two")
    assert 12 <= sum(before.values()) < sum(_made(tmp_path, "one").values())  # stopped part way
    _finished(_kb_build(tmp_path, "two", *args), tmp_path, "two")
    after = _made(tmp_path, "two")
    assert {k: after[k] for k in before} == before  # every finished call came from the cache
    assert _kb(tmp_path, "one") == _kb(tmp_path, "two")


def test_a_worker_with_the_ray_executor_runs_a_server_kb_build_on_the_cluster(tmp_path: Path, cluster: str) -> None:
    """A `kb-build` job claimed by `KNOWTREE_EXECUTOR=ray knowtree worker` sends its stages' calls out as Ray
    tasks (seen running), and the KB is the one a one-process `knowtree kb build` makes."""
    files = write_kb_inputs(tmp_path)
    _finished(_kb_build(tmp_path, "one", themes="similarity"), tmp_path, "one")  # the server's default
    body = {**files, "docs": [files["docs"]], "solutions": "eager", "context": "model", "threshold": 0.8,
            "embedder": "hash"}
    assert _job_on_a_ray_worker(tmp_path, cluster, "/v1/kbs/audio/build", body, KB_TASKS), (
        "no Ray task process ran the job's model calls"
    )
    one, two = _kb(tmp_path, "one"), _kb(tmp_path, "kb")
    assert one["issues"] and all(status != "pending" for *_, status, _ in one["issues"]) and one == two


def test_the_cluster_fixture_stops_only_the_processes_naming_its_folder(tmp_path: Path) -> None:
    """`stop_processes_naming` ends the processes whose command line or open files name its marker
    (a Ray agent renames itself but keeps its log there open), and no other (a Ray cluster of a
    benchmark or a user beside the tests stays up)."""
    sleeper = "import sys, time; time.sleep(120)"
    holder = "import os, time; f = open(os.environ['KT_LOG'], 'w'); time.sleep(120)"
    (tmp_path / "ktray-ours").mkdir()
    ours = subprocess.Popen([sys.executable, "-c", sleeper, str(tmp_path / "ktray-ours")])
    agent = subprocess.Popen([sys.executable, "-c", holder],
                             env={**os.environ, "KT_LOG": str(tmp_path / "ktray-ours" / "agent.log")})
    theirs = subprocess.Popen([sys.executable, "-c", sleeper, str(tmp_path / "ktray-theirs")])
    try:
        time.sleep(0.5)
        assert sorted(stop_processes_naming(str(tmp_path / "ktray-ours"))) == sorted([ours.pid, agent.pid])
        assert ours.wait(10) == -signal.SIGTERM and agent.wait(10) == -signal.SIGTERM
        assert theirs.poll() is None
    finally:
        for proc in (ours, agent, theirs):
            proc.kill()
            proc.wait(10)
