"""Who is calling (API keys), how often (a token bucket per key), and how much they send.

`Authenticator.authenticate(headers)` is shared by the REST routes (a FastAPI dependency) and the
MCP endpoint (an ASGI wrapper), so both apply the same tenancy.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import Request

from knowtree.server.config import ServerConfig
from knowtree.server.problems import Problem, problem_body
from knowtree.server.tenancy import LOCAL_PRINCIPAL, KeyStore, Principal


class TokenBucket:
    """`rate` tokens per second up to `burst`; `take()` returns 0 or the seconds until a token is free."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        now = time.monotonic()
        with self._lock:
            tokens, last = self._tokens.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._tokens[key] = (tokens - 1.0, now)
                return 0.0
            self._tokens[key] = (tokens, now)
            return (1.0 - tokens) / self.rate


class Authenticator:
    def __init__(self, keys: KeyStore, config: ServerConfig) -> None:
        self.keys = keys
        self.config = config
        self.bucket = TokenBucket(config.rate_per_second, config.rate_burst)
        self._open_checked = 0.0
        self._open = False

    def is_open(self) -> bool:
        """No key needed: bound to loopback (auth=auto) and no active key in the database (cached 1 s)."""
        if not self.config.open_without_keys:
            return False
        now = time.monotonic()
        if now - self._open_checked > 1.0:
            self._open = self.keys.active_count() == 0
            self._open_checked = now
        return self._open

    def refresh(self) -> None:
        """Forget the cached open/closed state (after keys were created or revoked in this process)."""
        self._open_checked = 0.0

    def authenticate(self, headers: Mapping[str, str]) -> Principal:
        key = _key_from(headers)
        if key is None:
            if self.is_open():
                return LOCAL_PRINCIPAL
            raise Problem(
                401, "an API key is required: send 'Authorization: Bearer KEY' (create one with `knowtree keys create`)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        principal = self.keys.verify(key)
        if principal is None:
            raise Problem(401, "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"})
        wait = self.bucket.take(principal.key_id or principal.tenant)
        if wait > 0:
            raise Problem(
                429,
                f"rate limit of {self.config.rate_per_second:g} requests/s exceeded: retry in {wait:.2f}s",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )
        return principal


def _key_from(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = headers.get("x-api-key")
    return key.strip() if key and key.strip() else None


async def principal(request: Request) -> Principal:
    """FastAPI dependency: the caller (401/429 as problem details). Async: one indexed lookup, no
    thread hop per request."""
    auth: Authenticator = request.app.state.auth
    return auth.authenticate(request.headers)


ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[None]]


async def _send_problem(send: Callable[[dict[str, Any]], Awaitable[None]], status: int, detail: str,
                        headers: dict[str, str] | None = None) -> None:
    import json

    body = json.dumps(problem_body(status, detail)).encode("utf-8")
    raw = [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware: a request body over the limit gets 413, on every route. Checked on
    Content-Length, and while the body streams in (chunked, or a Content-Length that understates
    it): at the first byte past the limit the app's reading stops, and whatever the app answers
    to that (a parser's 400, a handler's error) is replaced by the 413. Upload routes get the larger
    upload limit."""

    def __init__(self, app: Any, config: ServerConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = scope.get("path", "").endswith("/upload")
        limit = self.config.max_upload_bytes if upload else self.config.max_request_bytes
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > limit
            except ValueError:
                await _send_problem(send, 400, "invalid Content-Length")
                return
            if too_big:
                await _send_problem(send, 413, f"request body over the limit of {limit:,} bytes")
                return
        seen = 0
        over = False
        started = False

        async def limited_receive() -> dict[str, Any]:
            nonlocal seen, over
            if over:  # the app asked again after the limit: the client is as good as gone
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    over = True
                    raise _TooLarge(limit)
            return message

        async def guarded_send(message: dict[str, Any]) -> None:
            nonlocal started
            if over and not started:
                return  # the app's answer to a body it could not finish reading: the 413 goes instead
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not over:  # not ours: the server's error handling answers it
                raise
        if over and not started:
            await _send_problem(send, 413, f"request body over the limit of {limit:,} bytes")


class _TooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


class McpAuth:
    """ASGI wrapper for the MCP endpoint: authenticates like the REST routes and puts the caller in
    `scope["state"]["principal"]` for the tools to read."""

    def __init__(self, app: Any, auth_getter: Callable[[], Authenticator]) -> None:
        self.app = app
        self.auth_getter = auth_getter

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
            try:
                who = self.auth_getter().authenticate(headers)
            except Problem as p:
                await _send_problem(send, p.status, p.detail, p.headers)
                return
            scope.setdefault("state", {})["principal"] = who
        await self.app(scope, receive, send)


class LoopbackGuard:
    """ASGI middleware for a server bound to loopback, where requests may carry no key: a web page the
    user visits must not reach it. Refuses a Host that is not a trusted (loopback) name — DNS
    rebinding — and a state-changing request whose Origin is another site (cross-site form posts)."""

    SAFE = frozenset({"GET", "HEAD", "OPTIONS"})

    def __init__(self, app: Any, trusted_hosts: list[str]) -> None:
        self.app = app
        self.trusted = {h.strip("[]").lower() for h in trusted_hosts}

    def _trusted(self, netloc: str) -> bool:
        from urllib.parse import urlsplit

        try:
            name = urlsplit(f"//{netloc}").hostname
        except ValueError:
            return False
        return name is not None and name.lower() in self.trusted

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            host = headers.get(b"host", b"").decode("latin-1")
            if not self._trusted(host):
                await _send_problem(send, 403, f"host {host!r} is not served here: use 127.0.0.1 or localhost")
                return
            origin = headers.get(b"origin", b"").decode("latin-1")
            if origin and scope.get("method", "GET") not in self.SAFE and not self._trusted(origin.split("://", 1)[-1]):
                await _send_problem(send, 403, f"requests from {origin!r} may not change this server")
                return
        await self.app(scope, receive, send)
