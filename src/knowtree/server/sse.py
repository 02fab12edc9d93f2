"""Server-Sent Events: a blocking library call run in a thread, its callbacks streamed as events.

Events are `event: NAME` + one `data:` line of JSON. An error ends the stream with an `error` event
holding problem details (the HTTP status was already sent as 200).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import StreamingResponse

from knowtree.errors import KnowtreeError
from knowtree.server.problems import Problem, from_library_error, problem_body

Emit = Callable[[str, Any], None]


def format_event(event: str, data: Any) -> bytes:
    payload = json.dumps(data, default=_default, separators=(",", ":"))
    return f"event: {event}\ndata: {payload}\n\n".encode()


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return str(value)


def error_data(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, Problem):
        return problem_body(exc.status, exc.detail)
    if isinstance(exc, KnowtreeError):
        p = from_library_error(exc)
        return problem_body(p.status, p.detail)
    return problem_body(500, "internal error")


async def run_streaming(fn: Callable[[Emit], tuple[str, Any]]) -> AsyncIterator[bytes]:
    """Run `fn(emit)` in a worker thread; yield each `emit(event, data)` as it happens, then the
    (event, data) pair `fn` returns, or an `error` event."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    done = object()

    def emit(event: str, data: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (event, data))

    def work() -> None:
        try:
            emit(*fn(emit))
        except BaseException as exc:
            emit("error", error_data(exc))
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, ("", done))

    worker = loop.run_in_executor(None, work)
    try:
        while True:
            event, data = await queue.get()
            if data is done:
                break
            yield format_event(event, data)
    finally:
        await worker


def sse_response(events: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
