"""Independent pieces of model-call work, run in this process or elsewhere (a Ray cluster).

A stage whose calls do not depend on each other (the KB build's per-document chunk contexts, theme
batches, subtree batches, solutions) hands its items to a `Calls`: `map(fn, items)` runs
`fn(client, item)` for each and yields `(index, result)` as results arrive, in any order. `fn` is a
module-level function (or a `functools.partial` of one), so it can travel to another process, and
depends only on its item and the client's model and cache: the result is the same wherever it ran.
`Here` runs the items one after another through the caller's client (the one-process build);
`knowtree.distributed.RayFanout` sends them out as Ray tasks, each calling through a client on the
same store and run, so the shared model-call cache answers any call made before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol, TypeVar

from knowtree.llm.client import LLMClient

T = TypeVar("T")
R = TypeVar("R")


class Calls(Protocol):
    def map(self, fn: Callable[[LLMClient, T], R], items: Sequence[T]) -> Iterable[tuple[int, R]]: ...


class Here:
    """`Calls` in this process: the items in order, one after another, through `client`."""

    def __init__(self, client: LLMClient) -> None:
        self.client = client

    def map(self, fn: Callable[[LLMClient, T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
        for i, item in enumerate(items):
            yield i, fn(self.client, item)


def in_order(
    results: Iterable[tuple[int, R]],
    sizes: Sequence[int],
    progress: Callable[[int, int], None] | None = None,
    *,
    before: int = 0,
) -> list[R]:
    """The results of `Calls.map` in the items' order. `sizes`: how much work each item is (e.g. the
    chunks or seeds in it); `progress(done, total)` after each arrives, counting `before` done
    already and `before + sum(sizes)` in all."""
    out: dict[int, R] = {}
    done, total = before, before + sum(sizes)
    for i, result in results:
        out[i] = result
        done += sizes[i]
        if progress:
            progress(done, total)
    return [out[i] for i in range(len(sizes))]
