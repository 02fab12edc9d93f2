"""`knowtree serve` (HTTP API + web UI + MCP over HTTP) and `knowtree mcp` (MCP over stdio); the
server's API keys are `keys.py`."""

from __future__ import annotations

from typing import Annotated

import typer

from knowtree.cli.common import err, open_kt, run
from knowtree.cli.options import DbOpt, ModelOpt

MISSING = 'the server needs its extra: pip install "knowtree[server]"'


def serve_command(
    host: Annotated[str, typer.Option(help="address to bind (loopback: no key needed until one exists)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8080,
    db: DbOpt = None,
    model: ModelOpt = None,
    allow_root: Annotated[
        list[str] | None, typer.Option("--allow-root", help="directory builds may read from (repeatable)")
    ] = None,
    tenant_root: Annotated[
        list[str] | None,
        typer.Option(
            "--tenant-root",
            help="TENANT=DIR: a directory only that tenant's builds may read (repeatable; a tenant named"
            " here reads only its own roots, the others --allow-root's)",
        ),
    ] = None,
    require_keys: Annotated[
        bool, typer.Option("--require-keys", help="always require an API key, even on loopback")
    ] = False,
    max_upload_mb: Annotated[float, typer.Option(help="largest upload, MiB")] = 20.0,
    max_inflated_mb: Annotated[
        float | None,
        typer.Option(help="largest size a compressed file (.gz, a DOCX) may inflate to, MiB (default: --max-upload-mb)"),
    ] = None,
    rate: Annotated[float, typer.Option(help="requests per second per API key")] = 20.0,
    burst: Annotated[int, typer.Option(help="requests a key may make at once")] = 60,
    no_worker: Annotated[bool, typer.Option("--no-worker", help="do not run build jobs in this process")] = False,
    job_lease: Annotated[
        float,
        typer.Option(
            "--job-lease", min=1.0, max=3600.0,
            help="seconds a running job stays this server's without a heartbeat; another server on the"
            " database takes it over only after that",
        ),
    ] = 30.0,
    check: Annotated[
        str,
        typer.Option(
            help="check of the database before serving: quick (every page, whatever the size), full"
            " (integrity and full-text index), fast (header, schema and core tables only)",
        ),
    ] = "quick",
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
) -> None:
    """Serve the HTTP API (/v1, docs at /docs), the web tree browser (/ui) and MCP (/mcp)."""
    if check not in ("fast", "quick", "full"):
        raise typer.BadParameter(f"--check {check!r}: use fast, quick or full")

    def go() -> None:
        try:
            import uvicorn

            from knowtree.server.app import create_app
            from knowtree.server.config import MiB, ServerConfig, is_loopback
        except ImportError:
            raise err(MISSING, 2) from None
        if not is_loopback(host) and not require_keys:
            typer.echo(f"note: {host} is not loopback: every request needs an API key", err=True)
        config = ServerConfig(
            host=host,
            port=port,
            auth="keys" if require_keys else "auto",
            allowed_roots=allow_root or [],
            tenant_roots=tenant_roots(tenant_root or []),
            max_upload_bytes=int(max_upload_mb * MiB),
            max_inflated_bytes=int(max_inflated_mb * MiB) if max_inflated_mb else None,
            rate_per_second=rate,
            rate_burst=burst,
            jobs_worker=not no_worker,
            job_lease_seconds=job_lease,
        )
        check_database(db, check)  # a damaged file, whatever its size: refused before anything writes
        kt = open_kt(db=db, model=model)
        with kt:
            uvicorn.run(create_app(kt, config), host=host, port=port, log_level=log_level)

    run(go, bulk=True)


def mcp_command(
    db: DbOpt = None,
    model: ModelOpt = None,
    allow_root: Annotated[
        list[str] | None, typer.Option("--allow-root", help="directory the build tool may read (repeatable)")
    ] = None,
) -> None:
    """Serve MCP over stdio (for Claude Desktop, Cursor, agents): remember, recall, ask, browse, build."""

    def go() -> None:
        try:
            from knowtree.server.config import ServerConfig
            from knowtree.server.jobs import JobWorker
            from knowtree.server.mcp_server import build_mcp
            from knowtree.server.service import Service
        except ImportError:
            raise err(MISSING, 2) from None
        kt = open_kt(db=db, model=model)
        service = Service(kt, ServerConfig(allowed_roots=allow_root or [], mcp=False))
        worker = JobWorker(service.jobs, service.run_job)
        worker.start()
        service.worker = worker
        try:
            build_mcp(lambda: service).run("stdio")
        finally:
            worker.stop()
            kt.close()

    run(go)


def check_database(db: str | None, level: str) -> None:
    """Refuse (one line, exit 3) a database that fails the check at `level` (`store.guard.preflight`)."""
    import logging
    import time

    from knowtree.config import Settings
    from knowtree.store.dialect import is_url
    from knowtree.store.guard import preflight

    path = Settings.load({"db": db}).db
    if is_url(path):  # PostgreSQL checks its own pages; its schema is checked when the store opens
        return
    started = time.perf_counter()
    preflight(path, level)  # type: ignore[arg-type]
    logging.getLogger("knowtree.server").info(
        "%s: %s check passed in %.2f s", path, level, time.perf_counter() - started
    )


def tenant_roots(pairs: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for pair in pairs:
        tenant, sep, root = pair.partition("=")
        if not sep or not tenant.strip() or not root.strip():
            raise typer.BadParameter(f"--tenant-root {pair!r}: write TENANT=DIR")
        out.setdefault(tenant.strip(), []).append(root.strip())
    return out
