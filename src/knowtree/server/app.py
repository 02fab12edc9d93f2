"""The ASGI app: `create_app(kt, config)` → FastAPI with the REST API under /v1, offline docs at /docs,
the web tree browser at /ui and the MCP endpoint at /mcp.

    uvicorn: `knowtree serve` (cli/serve.py) · tests: `httpx.ASGITransport(app=create_app(...))`
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

import knowtree
from knowtree.core import KnowTree
from knowtree.server import routes_ask, routes_jobs, routes_kbs, routes_memories, routes_trees, ui
from knowtree.server.auth import Authenticator, BodyLimit, LoopbackGuard, McpAuth
from knowtree.server.config import ServerConfig, is_loopback
from knowtree.server.jobs import JobWorker
from knowtree.server.models import ERROR_RESPONSES, Health
from knowtree.server.problems import install_handlers
from knowtree.server.service import Service
from knowtree.server.tenancy import KeyStore

log = logging.getLogger("knowtree.server")

DESCRIPTION = """Navigable long-term memory: trees over documents and conversations, answers with citations.

Authenticate with `Authorization: Bearer KEY` (keys: `knowtree keys create TENANT`). A server bound to
loopback with no key in its database is open to the local owner. Errors are RFC 9457 problem details.
"""


def create_app(kt: KnowTree, config: ServerConfig | None = None) -> FastAPI:
    config = config or ServerConfig()
    service = Service(kt, config)
    auth = Authenticator(KeyStore(kt.store), config)
    mcp_app: Any = None
    mcp_server: Any = None
    if config.mcp:
        from knowtree.server.mcp_server import build_mcp, http_principal

        mcp_server = build_mcp(lambda: service, http_principal)
        starlette_app = mcp_server.streamable_http_app(
            streamable_http_path="/mcp", stateless_http=True, json_response=True, host=config.host
        )
        mcp_app = starlette_app.routes[0].endpoint  # the transport's ASGI app, mounted below with auth

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker = None
        if config.jobs_worker:
            worker = JobWorker(service.jobs, service.run_job, on_end=service.job_ended)
            resumed = worker.start()
            service.worker = worker
            swept = service.sweep_uploads()
            if swept:
                log.warning("removed %d upload folder(s) no job needs", swept)
            if resumed:
                log.warning("taking over %d job(s) whose worker's lease expired", resumed)
        try:
            if mcp_server is not None:
                async with mcp_server.session_manager.run():
                    yield
            else:
                yield
        finally:
            if worker is not None:
                worker.stop()
                service.worker = None

    app = FastAPI(
        title="knowtree",
        version=knowtree.__version__,
        description=DESCRIPTION,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        responses=ERROR_RESPONSES,
    )
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.state.service = service
    app.state.auth = auth
    install_handlers(app)

    @app.get("/v1/health", response_model=Health, tags=["server"], summary="Liveness and configuration")
    def health() -> Health:
        return Health(
            status="ok",
            version=knowtree.__version__,
            auth="open" if auth.is_open() else "keys",
            jobs_worker=service.worker is not None,
        )

    for module in (routes_trees, routes_ask, routes_memories, routes_kbs, routes_jobs):
        app.include_router(module.router)
    ui.install(app)
    _install_docs(app)
    if mcp_app is not None:
        from starlette.routing import Route

        app.router.routes.append(Route("/mcp", endpoint=McpAuth(mcp_app, lambda: auth), methods=["GET", "POST", "DELETE"]))
    app.add_middleware(BodyLimit, config=config)
    if is_loopback(config.host):
        app.add_middleware(LoopbackGuard, trusted_hosts=config.trusted_hosts)
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, with every error response as what the server sends: a problem detail in
    `application/problem+json` (FastAPI documents them as `application/json`)."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        for item in spec.get("paths", {}).values():
            for op in item.values():
                for status, response in (op.get("responses") or {}).items():
                    content = response.get("content") or {}
                    if status[:1] in "45" and "application/json" in content:
                        content["application/problem+json"] = content.pop("application/json")
        for name in ("HTTPValidationError", "ValidationError"):  # replaced by ProblemDetail
            spec.get("components", {}).get("schemas", {}).pop(name, None)
        app.openapi_schema = spec
    return app.openapi_schema


def _install_docs(app: FastAPI) -> None:
    """Swagger UI from the `swagger-ui-bundle` package's files: no CDN."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:  # pragma: no cover - the [server] extra ships it
        swagger_ui_path = None
    if swagger_ui_path is not None:
        app.mount("/docs/assets", StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        if swagger_ui_path is None:  # pragma: no cover
            return HTMLResponse('<p>Interactive docs need swagger-ui-bundle; the schema is at <a href="/openapi.json">/openapi.json</a>.</p>')
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title="knowtree API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon-32x32.png",
        )
