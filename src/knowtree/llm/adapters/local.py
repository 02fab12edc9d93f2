"""The embedded model: llama-cpp-python running a GGUF offline, in a model process of its own.

The model runs in a worker process (`local_worker`), started on the first call, so a native crash in
llama.cpp (SIGSEGV, SIGILL), an OOM kill or a `kill -9` ends that call with a one-line
`ModelCallError` naming the cause, and the next call starts a fresh worker; the calling process (the
CLI, `knowtree serve`) never goes down with it. With `KNOWTREE_MODEL_SOCKET=PATH` (or `socket=`) it
uses the model process that `knowtree model serve --socket PATH` runs instead, so several processes
share one loaded model.

Loading takes seconds and ~2 GB of RAM, so it happens on the first call, not at construction. The
worker answers one call at a time and a lock here serialises this adapter's calls (`max_concurrency = 1`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket as socketlib
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from knowtree.errors import ConfigError, KnowtreeError, ModelCallError
from knowtree.llm.adapters.llama_build import exit_cause
from knowtree.llm.adapters.llama_engine import DEFAULT_SYSTEM, NEEDS_LLAMA_CPP, LogitTap
from knowtree.llm.adapters.local_worker import DEFAULT_ENGINE, receive, send
from knowtree.llm.adapters.model_files import (
    DEFAULT_LOCAL_MODEL,
    ensure_local_model,
    is_default_spec,
    resolve_gguf,
)
from knowtree.llm.base import Completion, Model, Request

__all__ = ["DEFAULT_SYSTEM", "NEEDS_LLAMA_CPP", "LocalModel", "LogitTap"]

SOCKET_ENV = "KNOWTREE_MODEL_SOCKET"
#: seconds a call may go without a reply or a streamed piece before the model process is stopped
#: (settings: `model_timeout`); a long prompt on a slow CPU takes minutes, a hung process forever
DEFAULT_TIMEOUT = 900.0

_ERRORS: dict[str, type[KnowtreeError]] = {"ConfigError": ConfigError, "ModelCallError": ModelCallError}


def _default_threads() -> int:
    """`KNOWTREE_THREADS`, else every core: thread count is the main speed knob on CPU."""
    env = os.environ.get("KNOWTREE_THREADS")
    if env:
        try:
            value = int(env)
        except ValueError:
            value = 0
        if value < 1:
            raise ConfigError(f"KNOWTREE_THREADS must be a positive integer, got {env!r}")
        return value
    return os.cpu_count() or 1


class _Lost(Exception):
    """The model process went away in the middle of a call."""


@dataclass
class _Channel:
    """One conversation with a model process: a child over pipes, or a shared one over a socket."""

    inp: IO[bytes]
    out: IO[bytes]
    proc: subprocess.Popen[bytes] | None = None
    sock: socketlib.socket | None = None
    info: dict[str, Any] = field(default_factory=dict)
    stalled: bool = False  # the watchdog stopped it: no reply (or streamed piece) within the timeout

    def call(
        self,
        message: dict[str, Any],
        on_piece: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """`message`'s reply. `timeout`: seconds the model may go without a reply or a streamed piece;
        past it the process is stopped (a shared one: this connection is cut) and the call is lost."""
        watchdog = _Watchdog(timeout, self._stall) if timeout else None
        try:
            send(self.out, message)
            while (reply := receive(self.inp)) is not None:
                if "piece" in reply:
                    if watchdog is not None:
                        watchdog.touch()
                    if on_piece is not None:
                        on_piece(str(reply["piece"]))
                    continue
                if "error" in reply:
                    error = reply["error"]
                    raise _ERRORS.get(error.get("type"), ModelCallError)(str(error.get("message")))
                return reply.get("ok")
        except (OSError, ValueError) as exc:
            raise _Lost(str(exc)) from exc
        finally:
            if watchdog is not None:
                watchdog.cancel()
        raise _Lost("end of stream")

    def _stall(self) -> None:
        self.stalled = True
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.kill()
        elif self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socketlib.SHUT_RDWR)

    def close(self, *, wait: float = 5.0) -> None:
        for stream in (self.out, self.inp):
            with contextlib.suppress(OSError):
                stream.close()
        if self.sock is not None:
            self.sock.close()
        if self.proc is not None:  # its stdin closed: it exits; one that does not is killed
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class _Watchdog:
    """Calls `fire` once when `seconds` pass without a `touch` (a hung model process: a deadlock,
    a stopped process). A timer thread, restarted per touch: a standard-library timer is all this
    needs (no library adds anything for one deadline)."""

    def __init__(self, seconds: float, fire: Callable[[], None]) -> None:
        self.seconds = seconds
        self.fire = fire
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self.touch()

    def touch(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.seconds, self.fire)
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


class LocalModel(Model):
    """A GGUF model run by llama-cpp-python in a model process (the default, offline model)."""

    max_concurrency = 1
    free = True  # nothing is billed: a cost cap holds without prices

    def __init__(
        self,
        gguf: str | None = None,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        seed: int = 0,
        socket: str | None = None,
        engine: str = DEFAULT_ENGINE,
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> None:
        # An explicit file is checked now (cheap); the default is assembled lazily (1.1 GB of copying).
        self._path: Path | None = None if is_default_spec(gguf) else resolve_gguf(gguf)
        stem = DEFAULT_LOCAL_MODEL if self._path is None else self._path.stem
        self.id = f"local:{stem}"
        self.context_window = n_ctx
        self.n_ctx = n_ctx
        self.n_threads = n_threads if n_threads is not None else _default_threads()
        self.seed = seed
        self.socket = socket if socket is not None else (os.environ.get(SOCKET_ENV) or None)
        self.engine = engine
        self.timeout = timeout  # seconds without a reply or a streamed piece: a hung call (None: wait)
        self._channel: _Channel | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> Path | None:
        """The GGUF file, once known (the default model's path is known after the first call)."""
        return self._path

    @property
    def worker_pid(self) -> int | None:
        """The model process's pid while one is running (for a shared one, its own pid)."""
        return None if self._channel is None else self._channel.info.get("pid")

    def load(self) -> None:
        """Load the model now instead of on the first call (e.g. to fail early or warm up)."""
        with self._lock:
            self._call({"op": "load"}, None)

    def config(self) -> dict[str, Any]:
        """What the model process needs to load this model (the path resolved first)."""
        if self._path is None:
            self._path = ensure_local_model()
        return {
            "path": str(self._path),
            "n_ctx": self.n_ctx,
            "n_threads": self.n_threads,
            "seed": self.seed,
            "id": self.id,
        }

    def _ensure_loaded(self) -> _Channel:
        """The channel to the model process: the running one, or a new one (started or connected)."""
        if self._channel is None:
            channel = self._connect() if self.socket else self._spawn()
            try:
                channel.info = channel.call({"op": "hello"}) or {}
            except _Lost as exc:
                channel.close(wait=1.0)
                raise ModelCallError(self._lost_message(channel, "while starting", str(exc))) from None
            except KnowtreeError:
                channel.close(wait=1.0)
                raise
            served = channel.info.get("id")
            if self.socket and served != self.id:
                channel.close()
                raise ConfigError(
                    f"the shared model process at {self.socket} serves {served}, not {self.id}: "
                    f"unset {SOCKET_ENV} or start it with this model"
                )
            self._channel = channel
        return self._channel

    def _spawn(self) -> _Channel:
        command = [
            sys.executable, "-m", "knowtree.llm.adapters.local_worker",
            "--engine", self.engine, "--config", json.dumps(self.config()), "--parent", str(os.getpid()),
        ]  # fmt: skip
        # the worker imports the same knowtree as this process, whatever the working directory
        here = str(Path(__file__).resolve().parents[3])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
        try:
            proc = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True, env=env
            )
        except OSError as exc:
            raise ModelCallError(f"cannot start the embedded model process: {exc}") from exc
        assert proc.stdin is not None and proc.stdout is not None
        return _Channel(inp=proc.stdout, out=proc.stdin, proc=proc)

    def _connect(self) -> _Channel:
        assert self.socket is not None
        sock = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
        try:
            sock.connect(self.socket)
        except OSError as exc:
            sock.close()
            raise ModelCallError(
                f"no shared model process at {self.socket} ({exc.strerror or exc}): start one with "
                f"`knowtree model serve --socket {self.socket}`, or unset {SOCKET_ENV}"
            ) from None
        return _Channel(inp=sock.makefile("rb"), out=sock.makefile("wb"), sock=sock)

    def _lost_message(self, channel: _Channel, when: str, detail: str) -> str:
        if channel.proc is not None:
            try:
                code = channel.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                channel.proc.kill()
                code = channel.proc.wait()
            return (
                f"the embedded model process ({self.id}) died ({exit_cause(code)}) {when}; "
                "the next call starts a new one; if this repeats, run `knowtree doctor`"
            )
        return (
            f"the shared model process at {self.socket} went away {when} ({detail}); "
            "the next call reconnects; if this repeats, check `knowtree model serve` and run `knowtree doctor`"
        )

    def _call(self, message: dict[str, Any], on_text: Callable[[str], None] | None) -> Any:
        """One call to the model process (the caller holds the lock); a lost process → ModelCallError."""
        channel = self._ensure_loaded()
        try:
            return channel.call(message, on_text, self.timeout)
        except _Lost as exc:
            self._channel = None
            if channel.stalled:
                text = (
                    f"the embedded model ({self.id}) gave no reply for {self.timeout:g} s during a call and was "
                    "stopped (model_timeout, KNOWTREE_MODEL_TIMEOUT); the next call starts a new one; "
                    "if this repeats, run `knowtree doctor`"
                )
            else:
                text = self._lost_message(channel, "during a call", str(exc))
            channel.close(wait=1.0)
            raise ModelCallError(text) from None

    def complete(self, request: Request) -> Completion:
        return self._complete(request, None)

    def complete_streaming(self, request: Request, on_text: Callable[[str], None]) -> Completion:
        return self._complete(request, on_text)

    def _complete(self, request: Request, on_text: Callable[[str], None] | None) -> Completion:
        message = {
            "op": "complete",
            "request": request.model_dump(mode="json", by_alias=True),
            "stream": on_text is not None,
        }
        with self._lock:
            result = self._call(message, on_text)
        return Completion.model_validate(result)

    def close(self) -> None:
        """Stop the model process (a shared one is only disconnected); a later call starts it again."""
        with self._lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
