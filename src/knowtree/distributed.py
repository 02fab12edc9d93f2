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

Left in the driver (not yet Ray tasks): reading, parsing and chunking the files, the structured
(PDF/DOCX/HTML) build, `enrich`, the KB build, and the server's jobs (a `knowtree worker` runs them).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from knowtree.config import Settings
from knowtree.construct.builder import branch_meta, leaf_meta
from knowtree.errors import ConfigError
from knowtree.llm.client import LLMClient
from knowtree.types import NodeMeta, Usage

if TYPE_CHECKING:
    from knowtree.core import KnowTree

Result = tuple[str, NodeMeta, Usage, bool]
#: batches per cluster CPU in one level: small enough that a killed worker's batch is little work
#: to hand over and the bar moves, large enough that a task's overhead (~ms) stays small
BATCHES_PER_CPU = 4
MAX_BATCH = 64
TASK_RETRIES = 5  # a task whose worker process died runs again (its finished calls are cache hits)

_OPEN: dict[str, KnowTree] = {}  # in a Ray worker process: the store and model, opened once per settings
_OPEN_LOCK = threading.Lock()


def store_location(db: str) -> str:
    """The database as every machine of a cluster names it: a URL as it is, a file path absolute."""
    if "://" in db:
        return db
    if db == ":memory:":
        raise ConfigError("--executor ray needs a database every Ray worker can open: a file or a postgresql:// URL, not :memory:")
    return os.path.abspath(db)


def _client(settings: dict[str, Any], run_id: str | None) -> LLMClient:
    import json

    from knowtree.core import KnowTree

    key = json.dumps(settings, sort_keys=True, default=str)
    with _OPEN_LOCK:
        kt = _OPEN.get(key)
        if kt is None:
            kt = KnowTree(settings=Settings.model_validate(settings))
            _OPEN[key] = kt
    return kt.client(run_id)


def leaf_calls(
    settings: dict[str, Any], run_id: str | None, items: list[tuple[str, str]], taxonomy: list[str]
) -> list[Result]:
    """A Ray task: the metadata of a batch of leaves, (id, chunk text) each."""
    client = _client(settings, run_id)
    with ThreadPoolExecutor(max_workers=client.concurrency) as pool:
        return list(pool.map(lambda it: (it[0], *leaf_meta(client, it[1], taxonomy)), items))


def branch_calls(
    settings: dict[str, Any], run_id: str | None, items: list[tuple[str, list[NodeMeta]]]
) -> list[Result]:
    """A Ray task: the metadata of a batch of branches, (id, the children's metadata) each."""
    client = _client(settings, run_id)
    with ThreadPoolExecutor(max_workers=client.concurrency) as pool:
        return list(pool.map(lambda it: (it[0], *branch_meta(client, it[1])), items))


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError('--executor ray needs Ray: pip install "knowtree[ray]"') from None
    return ray


def connect(address: str | None) -> Any:
    """Join the Ray cluster at `address` (auto, HOST:PORT or ray://HOST:PORT; None: RAY_ADDRESS,
    else a cluster started in this process). Returns the `ray` module."""
    ray = _ray()
    if not ray.is_initialized():
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS") or None,
            ignore_reinit_error=True,
            log_to_driver=False,
            configure_logging=False,
            include_dashboard=False,
        )
    return ray


class RayFanout:
    """`construct.builder.Fanout` on a Ray cluster: one level's calls as tasks of a batch each,
    results yielded as tasks finish (the driver's bar ticks per node). Usage reaches `client`
    (`LLMClient.account_remote`); the ledger rows were written by the tasks under its run."""

    def __init__(self, client: LLMClient, settings: Settings, address: str | None) -> None:
        self.ray = connect(address)
        self.client = client
        self.settings = {**settings.model_dump(), "db": store_location(settings.db)}
        self.run_id = client.run_id
        options = {"max_retries": TASK_RETRIES, "num_cpus": 1}
        self._leaves = self.ray.remote(**options)(leaf_calls)
        self._branches = self.ray.remote(**options)(branch_calls)

    def _batches(self, items: Sequence[Any]) -> list[list[Any]]:
        cpus = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        size = max(1, min(MAX_BATCH, math.ceil(len(items) / (cpus * BATCHES_PER_CPU))))
        return [list(items[i : i + size]) for i in range(0, len(items), size)]

    def _gather(self, refs: list[Any]) -> Iterator[Result]:
        pending = list(refs)
        while pending:
            done, pending = self.ray.wait(pending, num_returns=1)
            for result in self.ray.get(done[0]):
                self.client.account_remote(result[2])
                yield result

    def leaves(self, items: Sequence[tuple[str, str]], taxonomy: Sequence[str]) -> Iterator[Result]:
        tax = list(taxonomy)
        return self._gather(
            [self._leaves.remote(self.settings, self.run_id, b, tax) for b in self._batches(items)]
        )

    def branches(self, items: Sequence[tuple[str, list[NodeMeta]]]) -> Iterator[Result]:
        return self._gather([self._branches.remote(self.settings, self.run_id, b) for b in self._batches(items)])

    def close(self) -> None:
        """Leave the cluster (it keeps running; a cluster this process started stops)."""
        self.ray.shutdown()
