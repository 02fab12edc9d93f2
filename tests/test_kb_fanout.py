"""A KB build whose independent calls go out as tasks (`KBContext.calls`, `distributed.RayFanout`),
without Ray: `ray` replaced by an in-process stand-in that runs each task when it is waited for, the
last sent first, its arguments and result pickled as Ray sends them. The KB is the one-process build's
(same themes, clusters, issues, links, solutions, chunk contexts), every stage sent its calls out, each
call was made once and the driver's report counts them all."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import knowtree
from kb_helpers import OPTIONS, kb_content, write_kb_inputs
from knowtree import distributed

STAGES = {"context_sentences", "assign_batch", "expand_batch", "solve_item"}


class _Ref:
    def __init__(self, fn: Callable[..., Any], args: bytes) -> None:
        self.fn, self.args = fn, args

    def result(self) -> Any:
        return pickle.loads(pickle.dumps(self.fn(*pickle.loads(self.args))))


class _Task:
    def __init__(self, ray: InProcessRay, fn: Callable[..., Any], name: str) -> None:
        self.ray, self.fn, self.name = ray, fn, name

    def options(self, *, name: str) -> _Task:
        return _Task(self.ray, self.fn, name)

    def remote(self, *args: Any) -> _Ref:
        self.ray.sent.append(self.name)
        return _Ref(self.fn, pickle.dumps(args))


class InProcessRay:
    """What `distributed.Cluster` and `RayFanout` use of the `ray` module, in this process."""

    def __init__(self) -> None:
        self.sent: list[str] = []  # the task names, one per task sent

    def is_initialized(self) -> bool:
        return True

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2}

    def remote(self, **_: Any) -> Callable[[Callable[..., Any]], _Task]:
        return lambda fn: _Task(self, fn, fn.__name__)

    def wait(self, pending: list[_Ref], num_returns: int = 1) -> tuple[list[_Ref], list[_Ref]]:
        return pending[-num_returns:], pending[:-num_returns]

    def get(self, ref: _Ref) -> Any:
        return ref.result()


@pytest.fixture
def in_process_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessRay]:
    ray = InProcessRay()
    monkeypatch.setattr(distributed, "_ray", lambda: ray)
    try:
        yield ray
    finally:  # the stores the "tasks" opened (a Ray worker process keeps them until it ends)
        for _, store, _ in distributed._OPEN.values():
            store.close()
        distributed._OPEN.clear()


def _build(root: Path, db: str, **settings: Any) -> tuple[dict[str, list[Any]], Any, list[tuple]]:
    files = write_kb_inputs(root)
    with knowtree.open(root / db, model="keyword", **settings) as kt:
        report = kt.kb("audio", embedder="hash").build(**files, **OPTIONS)
        repeated = kt.store.query("SELECT key FROM llm_calls GROUP BY key HAVING SUM(1 - cached) > 1")
        return kb_content(kt.store, "audio"), report, repeated


def test_a_kb_built_by_tasks_is_the_one_process_kb(tmp_path: Path, in_process_ray: InProcessRay) -> None:
    one, one_report, _ = _build(tmp_path, "one.db")
    assert not in_process_ray.sent  # executor local: nothing sent
    # one call at a time in a task too (as the one-process build): a call two tasks made at once would
    # be made twice (the cache answers finished calls only), and the counts below compare call for call
    two, two_report, repeated = _build(tmp_path, "two.db", executor="ray", concurrency=1)
    assert set(in_process_ray.sent) == STAGES  # every stage's calls went out
    for stage in ("context_sentences", "expand_batch", "solve_item"):
        assert in_process_ray.sent.count(stage) > 1, stage  # in several tasks, answered last first
    assert one["issues"] and one["chunks"] and one["clusters"] and len(one["themes"]) > 1
    assert any(kind == "child" for _, kind, *_ in one["issues"])
    assert all(status != "pending" for *_, status, _ in one["issues"])  # eager: every issue solved
    assert len(one["chunks"]) > 2 * len({c[0].split("#")[0] for c in one["chunks"]})  # documents of several chunks
    assert one == two
    assert repeated == []
    assert two_report.usage.calls == one_report.usage.calls > 0  # the tasks' calls reached the driver
    assert (two_report.clusters, two_report.parents, two_report.children, two_report.solutions) == (
        one_report.clusters, one_report.parents, one_report.children, one_report.solutions
    )


def test_a_kb_add_sends_its_new_issues_calls_out(tmp_path: Path, in_process_ray: InProcessRay) -> None:
    """`kb add` shares the stages: its new clusters' subtrees and eager solutions go out as tasks."""
    files = write_kb_inputs(tmp_path, devices=2)
    more = tmp_path / "more"
    more.mkdir()
    extra = write_kb_inputs(more)  # all four devices: the first two's issues are in the KB already
    contents = []
    for db, executor in (("one.db", "local"), ("two.db", "ray")):
        with knowtree.open(tmp_path / db, model="keyword", executor=executor, concurrency=1) as kt:
            kt.kb("audio", embedder="hash").build(**files, **OPTIONS, join_threshold=0.95)  # new devices: new clusters
            sent = len(in_process_ray.sent)
            report = kt.kb("audio").add(issues=extra["issues"])
            assert (report.skipped, report.raw_issues, report.joined) == (24, 24, 0) and report.parents > 1
            contents.append(kb_content(kt.store, "audio"))
    assert {"expand_batch", "solve_item"} <= set(in_process_ray.sent[sent:])
    assert contents[0] == contents[1]
