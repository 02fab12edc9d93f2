"""RFC 9457 problem details: every error the API returns is one JSON object, never a stack trace.

`Problem` is raised by the service layer (and turned into a response by `install_handlers`); library
errors map by who is at fault: a user's mistake is 4xx, a model provider's failure 502, anything else
a bare 500 whose detail names no internals.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from knowtree.errors import ConfigError, InputError, KnowtreeError, ModelError, NotFoundError, UserError

log = logging.getLogger("knowtree.server")

MEDIA_TYPE = "application/problem+json"

_TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Content too large",
    415: "Unsupported media type",
    422: "Unprocessable content",
    429: "Too many requests",
    500: "Internal server error",
    502: "Model provider error",
    503: "Service unavailable",
}


class Problem(Exception):
    """An API error with an HTTP status and a human-readable detail."""

    def __init__(
        self, status: int, detail: str, *, title: str | None = None, headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title or _TITLES.get(status, "Error")
        self.headers = headers or {}
        self.extra = extra


def problem_body(status: int, detail: str, *, title: str | None = None, instance: str | None = None,
                 **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title or _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    if instance:
        body["instance"] = instance
    body.update(extra)
    return body


def problem_response(status: int, detail: str, *, headers: dict[str, str] | None = None,
                     title: str | None = None, instance: str | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse(
        problem_body(status, detail, title=title, instance=instance, **extra),
        status_code=status,
        media_type=MEDIA_TYPE,
        headers=headers,
    )


def from_library_error(exc: KnowtreeError) -> Problem:
    """A library error as a Problem. Not-found messages from the store name other trees and the
    database path, so they are replaced by a neutral one."""
    if isinstance(exc, NotFoundError):
        return Problem(404, "not found")
    if isinstance(exc, InputError):
        return Problem(422, str(exc))
    if isinstance(exc, ConfigError | UserError):
        return Problem(400, str(exc))
    if isinstance(exc, ModelError):
        return Problem(502, f"the model failed: {exc}")
    return Problem(500, "internal error")


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(
            exc.status, exc.detail, title=exc.title, headers=exc.headers, instance=request.url.path, **exc.extra
        )

    @app.exception_handler(KnowtreeError)
    async def _library(request: Request, exc: KnowtreeError) -> JSONResponse:
        p = from_library_error(exc)
        return problem_response(p.status, p.detail, instance=request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else _TITLES.get(exc.status_code, "error")
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # every method of the path, not only those of the first route matching it
            headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
        return problem_response(exc.status_code, detail, headers=headers, instance=request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", ""))} for e in exc.errors()
        ]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        detail = f"{'.'.join(first['loc'])}: {first['msg']}" if first["loc"] else first["msg"]
        return problem_response(422, detail, instance=request.url.path, errors=errors)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        return problem_response(500, "internal error", instance=request.url.path)


def _allowed_methods(request: Request) -> list[str]:
    from starlette.routing import Match

    methods: set[str] = set()
    for route in request.app.router.routes:
        allowed = getattr(route, "methods", None)
        if allowed and route.matches(request.scope)[0] != Match.NONE:
            methods |= set(allowed)
    return sorted(methods)
