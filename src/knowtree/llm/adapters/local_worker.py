"""The model process: holds one engine (the embedded llama.cpp model) and answers calls one at a time.

    python -m knowtree.llm.adapters.local_worker --config JSON [--engine module:Class]
        [--parent PID | --socket PATH]

With `--parent` it talks to the process that started it over its stdin/stdout and exits when that
process goes away (stdin closed, or a new parent pid). With `--socket` it listens on a Unix socket so
several processes (the CLI, `knowtree serve`, an eval) share one loaded model; calls from all of them
still run one at a time.

The protocol is one JSON object per line. A call is `{"op": "hello" | "load" | "complete", ...}`;
a `complete` call carries `"request"` (a `Request`) and `"stream"`. The worker answers with any number
of `{"piece": TEXT}` lines (streaming), then `{"ok": RESULT}` or `{"error": {"type", "message"}}`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

from knowtree.errors import KnowtreeError
from knowtree.llm.base import Completion, Request

DEFAULT_ENGINE = "knowtree.llm.adapters.llama_engine:LlamaEngine"


class Engine(Protocol):
    def describe(self) -> dict[str, Any]: ...
    def load(self) -> Any: ...
    def complete(self, request: Request, on_text: Callable[[str], None] | None) -> Completion: ...
    def close(self) -> None: ...


def send(out: IO[bytes], message: dict[str, Any]) -> None:
    out.write(json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n")
    out.flush()


def receive(inp: IO[bytes]) -> dict[str, Any] | None:
    """The next message, or None when the other side closed the stream."""
    line = inp.readline()
    if not line:
        return None
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError("a protocol message must be a JSON object")
    return message


def load_engine(dotted: str, config: dict[str, Any]) -> Engine:
    module, _, attr = dotted.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    engine: Engine = factory(config)
    return engine


def handle(engine: Engine, message: dict[str, Any], out: IO[bytes]) -> None:
    """Answer one call on `out`; every failure becomes an error message, never an exception."""
    try:
        op = message.get("op")
        if op == "hello":
            result: dict[str, Any] = {**engine.describe(), "pid": os.getpid()}
        elif op == "load":
            engine.load()
            result = {}
        elif op == "complete":
            request = Request.model_validate(message["request"])

            def piece(text: str) -> None:
                send(out, {"piece": text})

            completion = engine.complete(request, piece if message.get("stream") else None)
            result = completion.model_dump()
        else:
            raise ValueError(f"unknown operation {op!r}")
    except KnowtreeError as exc:
        send(out, {"error": {"type": type(exc).__name__, "message": str(exc)}})
        return
    except Exception as exc:  # a bug or a library error: reported, the worker stays up
        send(out, {"error": {"type": "ModelCallError", "message": f"{type(exc).__name__}: {exc}"}})
        return
    send(out, {"ok": result})


def _watch_parent(parent: int) -> None:
    """Exit as soon as the parent is gone, even in the middle of a call (ctypes releases the GIL)."""
    while True:
        if os.getppid() != parent:
            os._exit(0)
        time.sleep(0.5)


def serve_pipe(engine: Engine, parent: int) -> None:
    """Serve the parent over stdin/stdout until stdin closes."""
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything native code prints must not corrupt the protocol
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    inp = sys.stdin.buffer
    while (message := receive(inp)) is not None:
        handle(engine, message, protocol_out)
    engine.close()


def _connection(engine: Engine, conn: socket.socket, lock: threading.Lock) -> None:
    with conn, conn.makefile("rb") as inp, conn.makefile("wb") as out:
        try:
            while (message := receive(inp)) is not None:
                with lock:  # one call at a time, whoever asks
                    handle(engine, message, out)
        except (OSError, ValueError):  # the client went away, or sent garbage: drop it
            return


def _claim(path: Path) -> None:
    """Remove a stale socket file (no one listening); refuse when a server is already there."""
    if not path.exists():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()
        return
    finally:
        probe.close()
    raise OSError(f"a model server is already listening on {path}")


def serve_socket(engine: Engine, path: Path, *, ready: Callable[[], None] | None = None) -> None:
    """Listen on the Unix socket `path` (mode 0600) until interrupted; each client gets a thread."""
    _claim(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lock = threading.Lock()
    try:
        old = os.umask(0o177)
        try:
            server.bind(str(path))
        finally:
            os.umask(old)
        server.listen(16)
        if ready is not None:
            ready()
        while True:
            conn, _ = server.accept()
            threading.Thread(target=_connection, args=(engine, conn, lock), daemon=True).start()
    finally:
        server.close()
        with contextlib.suppress(OSError):
            path.unlink()
        engine.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m knowtree.llm.adapters.local_worker")
    parser.add_argument("--config", required=True, help="the engine's settings, as JSON")
    parser.add_argument("--engine", default=DEFAULT_ENGINE, help="module:factory of the engine")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--parent", type=int, help="serve this process over stdin/stdout")
    where.add_argument("--socket", help="serve every client of this Unix socket")
    args = parser.parse_args(argv)
    engine = load_engine(args.engine, json.loads(args.config))
    if args.socket:
        serve_socket(engine, Path(args.socket), ready=lambda: print(f"ready {args.socket}", flush=True))
    else:
        serve_pipe(engine, args.parent)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
