"""Builds on a Ray cluster (`knowtree build … --executor ray [--ray-address …]`, the [ray] extra).

The driver (the process that runs the build) plans the tree as a one-process build does (the
chunks, the node ids, the levels: `construct.builder.plan_tree`), then sends each level's model calls
out as Ray tasks, a batch of nodes per task: the leaves' metadata first, then each level's branches
once their children are done. A task opens the store by its URL (or absolute SQLite path) and the
model from the same model string, once per Ray worker process, and runs its batch through an
`LLMClient` on that store with this process's settings (per-process model concurrency =
`concurrency`), recording its calls in the ledger under the driver's run. The driver assembles the
nodes from the metadata that comes back, so the tree is the one a one-process build makes: the same
ids, texts and metadata (with a deterministic model, byte for byte).

A killed Ray worker: Ray runs its task again elsewhere (`max_retries`), and every call the dead
worker finished is answered by the shared model-call cache; a killed driver: run the same command
again, its finished calls are cache hits too. Progress is the driver's one bar for the whole cluster.

Reading and parsing the files (PDF text extraction is CPU-bound) runs as Ray tasks too
(`Cluster.mapper`, through `ingest.problems.load_each`); the files must be at the same paths on every
node. `knowtree enrich --executor ray` sends each level's calls through the same `RayFanout`
(`construct.enrich.enrich_tree(fanout=…)`), and `knowtree kb build|add --executor ray` each KB stage's
independent calls (`RayFanout.map`, the `construct.calls.Calls` of `construct.kb.builder.KBContext`):
the chunk contexts (a document each), theme and subtree batches, and solutions with their compliance
checks (an issue each, its passages retrieved in the driver); every task runs `model_calls`, named
after its stage's function on the cluster (`ray::solve_item`). Left in the driver (not yet Ray tasks):
chunking (string slicing, cheap), the structured build's model calls (PDF/DOCX/HTML trees; with
`--summaries none` it makes none), the KB's features, clustering, theme names, indexes and writes (it
stores each solution as it arrives), and a memory's add. A `knowtree worker` whose settings say
`executor: ray` (`KNOWTREE_EXECUTOR=ray`) runs its build, enrich and KB jobs through this module like
the CLI does.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from knowtree.config import Settings
from knowtree.construct.builder import branch_meta, leaf_meta
from knowtree.errors import ConfigError, InputError
from knowtree.llm.client import LLMClient, options_from
from knowtree.types import NodeMeta, Usage

Result = tuple[str, NodeMeta, Usage, bool]
#: batches per cluster CPU in one level: small enough that a killed worker's batch is little work
#: to hand over and the bar moves, large enough that a task's overhead stays small
BATCHES_PER_CPU = 4
#: items per task at most. Between two tasks a worker idles 15-50 ms (the result back to the driver,
#: the next task out) and a task's last calls run with fewer than `concurrency` in flight: at 64 a
#: worker made 0.76-0.78 of one process's calls/s, at 512 0.86 (20k chunks, slow:0.05, concurrency 8;
#: benchmarks/RESULTS.md). A killed worker's batch costs little more: its finished calls are cache hits
MAX_BATCH = 512
MAX_FILES = 16  # files per reading task (a PDF's text extraction is the costly part)
TASK_RETRIES = 5  # a task whose worker process died runs again (its finished calls are cache hits)

#: in a Ray worker process: the settings, store and model, opened once per settings
_OPEN: dict[str, tuple[Settings, Any, Any]] = {}
_OPEN_LOCK = threading.Lock()


def store_location(db: str) -> str:
    """The database as every machine of a cluster names it: a URL as it is, a file path absolute."""
    if "://" in db:
        return db
    if db == ":memory:":
        raise ConfigError("--executor ray needs a database every Ray worker can open: a file or a postgresql:// URL, not :memory:")
    return os.path.abspath(db)


def _client(settings: dict[str, Any], run_id: str | None) -> LLMClient:
    """A client on the store and model the settings name, both opened once per process."""
    import json

    from knowtree.llm.registry import resolve_model
    from knowtree.store import open_store

    key = json.dumps(settings, sort_keys=True, default=str)
    with _OPEN_LOCK:
        opened = _OPEN.get(key)
        if opened is None:
            s = Settings.model_validate(settings)
            opened = (s, open_store(s.db, busy_timeout=s.busy_timeout), resolve_model(s))
            _OPEN[key] = opened
    s, store, model = opened
    # the budget caps hold for the whole build: every task counts the run's calls in the shared ledger
    options = dataclasses.replace(options_from(s), run_wide=True)
    return LLMClient(model, store, options, run_id=run_id)


def model_calls(
    settings: dict[str, Any], run_id: str | None, fn: Callable[[LLMClient, Any], Any], items: list[Any]
) -> list[tuple[Any, Usage]]:
    """A Ray task: `fn(client, item)` for a batch of items (`construct.calls.Calls.map`'s work), `concurrency`
    at a time, each through a client of its own on the store and model the settings name (so its usage
    comes back beside its result: (result, usage) each, in the items' order)."""

    def one(item: Any) -> tuple[Any, Usage]:
        client = _client(settings, run_id)
        return fn(client, item), client.usage

    with ThreadPoolExecutor(max_workers=_client(settings, run_id).concurrency) as pool:
        return list(pool.map(one, items))


def leaf_call(taxonomy: list[str], client: LLMClient, item: tuple[str, str]) -> Result:
    """A leaf's metadata, (id, chunk text) given: `RayFanout.leaves`'s unit."""
    return (item[0], *leaf_meta(client, item[1], taxonomy))


def branch_call(client: LLMClient, item: tuple[str, list[NodeMeta]]) -> Result:
    """A branch's metadata, (id, the children's metadata) given: `RayFanout.branches`'s unit."""
    return (item[0], *branch_meta(client, item[1]))


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError('--executor ray needs Ray: pip install "knowtree[ray]"') from None
    return ray


class Cluster:
    """This process's place on a Ray cluster: `Cluster.join(address)` (auto, HOST:PORT or
    ray://HOST:PORT; None: RAY_ADDRESS, else a cluster started in this process), `leave()` when done
    (only the `join` that connected disconnects: a build inside another Ray program leaves it be)."""

    def __init__(self, ray: Any, joined: bool) -> None:
        self.ray = ray
        self._joined = joined

    @classmethod
    def join(cls, address: str | None) -> Cluster:
        ray = _ray()
        if ray.is_initialized():
            return cls(ray, False)
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS") or None,
            ignore_reinit_error=True,
            log_to_driver=False,
            configure_logging=False,
            include_dashboard=False,
        )
        return cls(ray, True)

    def cpus(self) -> int:
        return max(1, int(self.ray.cluster_resources().get("CPU", 1)))

    def batches(self, items: Sequence[Any], most: int = MAX_BATCH) -> list[list[Any]]:
        """`items` cut into about BATCHES_PER_CPU batches per cluster CPU, at most `most` each."""
        size = max(1, min(most, math.ceil(len(items) / (self.cpus() * BATCHES_PER_CPU))))
        return [list(items[i : i + size]) for i in range(0, len(items), size)]

    def mapper(self, fn: Callable[[str], Any], paths: list[str]) -> list[Any]:
        """`ingest.problems.Mapper` on the cluster: the files read (PDF text extraction, DOCX, HTML,
        text) by Ray tasks, a batch of files each, as this process names them (relative to its
        working directory: the files must be at the same paths on every node, a shared folder)."""
        task = self.ray.remote(max_retries=TASK_RETRIES, num_cpus=1)(read_files)
        refs = [task.remote(fn, os.getcwd(), batch) for batch in self.batches(paths, MAX_FILES)]
        out = [r for ref in refs for r in self.ray.get(ref)]
        return [r.error() if isinstance(r, _Failed) else r for r in out]

    def leave(self) -> None:
        if self._joined:
            self.ray.shutdown()
            self._joined = False


@dataclass
class _Failed:
    """An `InputError` as it travels back from a task (its class's own constructor may differ)."""

    cls: type[InputError]
    path: str
    reason: str

    def error(self) -> InputError:
        exc = self.cls.__new__(self.cls)
        InputError.__init__(exc, self.path, self.reason)
        return exc


def read_files(fn: Callable[[str], Any], cwd: str, paths: list[str]) -> list[Any]:
    """A Ray task: `fn` (`load_each`'s reader: checks the roots, reads, parses) over a batch of
    files, from the driver's working directory, so relative paths name the same files and the
    documents keep the paths a one-process build gives them (node ids hash them)."""
    here = os.getcwd()
    os.chdir(cwd)
    try:
        results = [fn(p) for p in paths]
    finally:
        os.chdir(here)
    return [_Failed(type(r), r.path, r.reason) if isinstance(r, InputError) else r for r in results]


class RayFanout:
    """`construct.calls.Calls` on a Ray cluster: `map(fn, items)` sends the items out as tasks of a
    batch each (`model_calls`, named after `fn` on the cluster: `ray::leaf_call`, ...) and yields
    (index, result) as tasks finish, so the driver's bar ticks per item. Usage reaches `client`
    (`LLMClient.account_remote`); the ledger rows were written by the tasks under its run. Also
    `construct.builder.Fanout` (a tree level's leaves and branches) on the same tasks."""

    def __init__(self, client: LLMClient, settings: Settings, cluster: Cluster) -> None:
        self.cluster = cluster
        self.ray = cluster.ray
        self.client = client
        self.settings = {**settings.model_dump(), "db": store_location(settings.db)}
        self.run_id = client.run_id
        self._calls = self.ray.remote(max_retries=TASK_RETRIES, num_cpus=1)(model_calls)

    def map(self, fn: Callable[[LLMClient, Any], Any], items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        name = getattr(fn, "func", fn).__name__
        task = self._calls.options(name=name)
        starts: dict[Any, int] = {}
        start = 0
        for batch in self.cluster.batches(items):
            starts[task.remote(self.settings, self.run_id, fn, batch)] = start
            start += len(batch)
        return self._gather(starts)

    def _gather(self, starts: dict[Any, int]) -> Iterator[tuple[int, Any]]:
        pending = list(starts)
        while pending:
            done, pending = self.ray.wait(pending, num_returns=1)
            for offset, (result, usage) in enumerate(self.ray.get(done[0])):
                self.client.account_remote(usage)
                yield starts[done[0]] + offset, result

    def leaves(self, items: Sequence[tuple[str, str]], taxonomy: Sequence[str]) -> Iterator[Result]:
        return (r for _, r in self.map(partial(leaf_call, list(taxonomy)), items))

    def branches(self, items: Sequence[tuple[str, list[NodeMeta]]]) -> Iterator[Result]:
        return (r for _, r in self.map(branch_call, items))


@contextmanager
def fanout_for(client: LLMClient, settings: Settings, *, wanted: bool = True) -> Iterator[RayFanout | None]:
    """While the block runs: a `RayFanout` for `client` on the cluster the settings name
    (`executor: ray`, `ray_address`), left when the block ends; None when the settings say local or
    the caller has no calls to send (`wanted` false)."""
    if settings.executor != "ray" or not wanted:
        yield None
        return
    cluster = Cluster.join(settings.ray_address)
    try:
        yield RayFanout(client, settings, cluster)
    finally:
        cluster.leave()
