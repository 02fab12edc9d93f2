"""Progress while a run goes: a line to stderr every few seconds, or a callback per question."""

from __future__ import annotations

import time
from collections.abc import Callable

from knowtree_eval.base import Record

ProgressSink = Callable[[str], None]
TickSink = Callable[[int, int, str], None]  # (questions done, total, metrics so far)


class Progress:
    """A line to stderr every few seconds: questions done, the headline metric so far, ETA."""

    def __init__(
        self, total: int, sink: ProgressSink | None, every: float, k: int, on_tick: TickSink | None = None
    ) -> None:
        self.total = total
        self.sink = sink
        self.on_tick = on_tick
        self.every = every
        self.k = k
        self.count = 0
        self.started = time.monotonic()
        self.last = self.started
        self.values: dict[str, list[float]] = {}

    def tick(self, record: Record) -> None:
        self.count += 1
        for name in ("correct", "judged", "f1", "hit_rate"):
            value = record.metrics.get(name)
            if value is not None:
                self.values.setdefault(f"{record.method} {_LABELS[name].format(k=self.k)}", []).append(value)
                break
        now = time.monotonic()
        if self.on_tick:
            self.on_tick(self.count, self.total, self.so_far())
        elif self.sink and now - self.last >= self.every:
            self.last = now
            self.sink(self.line(now))

    def note(self, text: str) -> None:
        """Something slow is starting (a tree build): say so before the next question line."""
        if self.on_tick:
            self.on_tick(self.count, self.total, text)
        elif self.sink:
            self.sink(f"  {text}")

    def so_far(self) -> str:
        return ", ".join(f"{n} {sum(v) / len(v):.3f}" for n, v in self.values.items())

    def line(self, now: float) -> str:
        elapsed = now - self.started
        rate = self.count / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.count) / rate if rate > 0 else float("nan")
        so_far = self.so_far()
        return (
            f"  {self.count}/{self.total} done ({self.count / max(self.total, 1):.0%})"
            f"{', ' + so_far if so_far else ''}; {rate:.1f}/s, ETA {_duration(eta)}"
        )

    def finish(self) -> None:
        if self.sink and self.count and not self.on_tick:
            self.sink(self.line(time.monotonic()))


_LABELS = {"correct": "accuracy", "judged": "judged", "f1": "F1", "hit_rate": "hit rate@{k}"}


def _duration(seconds: float) -> str:
    if seconds != seconds:  # NaN: nothing measured yet
        return "?"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"
