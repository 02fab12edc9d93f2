"""Progress for the CLI: a build's (a rich bar on a terminal, plain lines in logs: CI, redirects) and
an evaluation's (`EvalProgress`, a rich bar on stderr)."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import Any

from knowtree.llm.client import LLMClient
from knowtree.types import Usage


class BuildProgress:
    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.usage = Usage()
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._bar: Any = None
        self._task: Any = None
        self._last_line = 0.0

    def __enter__(self) -> BuildProgress:
        if self.enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description:8}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(
                    "{task.fields[calls]} calls · {task.fields[cached]} cached · {task.fields[tokens]} tok"
                ),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._bar.start()
            self._task = self._bar.add_task("leaves", total=None, calls=0, cached=0, tokens=0)
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def pause(self) -> None:
        """Hide the bar (to ask the user something); `resume` shows it again."""
        if self._bar is not None:
            self._bar.stop()

    def resume(self) -> None:
        if self._bar is not None:
            self._bar.start()

    def attach(self, client: LLMClient) -> None:
        client.listeners.append(self._on_call)

    def _on_call(self, usage: Usage, cached: bool) -> None:
        with self._lock:
            self.usage.add(usage)
        if self._bar is not None:
            u = self.usage
            self._bar.update(
                self._task, calls=u.calls, cached=u.cached, tokens=f"{u.input_tokens + u.output_tokens:,}"
            )

    def update(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, description=stage, completed=done, total=total)
            return
        now = time.monotonic()
        if done not in (0, total) and now - self._last_line < 5:
            return  # plain output: at most a line every 5 s
        self._last_line = now
        elapsed = now - self._started
        eta = f"{elapsed / done * (total - done):.0f}s" if done else "?"
        u = self.usage
        print(
            f"[{done}/{total}] {stage}: {u.calls} model requests so far, {u.cached} cached, "
            f"{u.input_tokens + u.output_tokens:,} tokens, {elapsed:.0f}s elapsed, ETA {eta}",
            file=sys.stderr,
            flush=True,
        )


class EvalProgress:
    """A rich progress bar on stderr: questions done, the metrics so far, elapsed and ETA."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = None

    def tick(self, done: int, total: int, text: str) -> None:
        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task(text, total=total)
        self.progress.update(self.task, completed=done, total=total, description=text)

    def stop(self) -> None:
        if self.task is not None:
            self.progress.stop()
