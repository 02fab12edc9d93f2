"""`knowtree serve` (HTTP API + web UI + MCP over HTTP), `knowtree mcp` (MCP over stdio) and
`knowtree keys create|list|revoke` (API keys of the server's tenants)."""

from __future__ import annotations

from typing import Annotated

import typer

from knowtree.cli.common import echo_json, err, open_kt, run
from knowtree.cli.options import DbOpt, JsonOpt, ModelOpt

keys_app = typer.Typer(no_args_is_help=True, help="API keys for `knowtree serve` (one tenant per key group).")

_MISSING = 'the server needs its extra: pip install "knowtree[server]"'


def serve_command(
    host: Annotated[str, typer.Option(help="address to bind (loopback: no key needed until one exists)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8080,
    db: DbOpt = None,
    model: ModelOpt = None,
    allow_root: Annotated[
        list[str] | None, typer.Option("--allow-root", help="directory builds may read from (repeatable)")
    ] = None,
    require_keys: Annotated[
        bool, typer.Option("--require-keys", help="always require an API key, even on loopback")
    ] = False,
    max_upload_mb: Annotated[float, typer.Option(help="largest upload, MiB")] = 20.0,
    rate: Annotated[float, typer.Option(help="requests per second per API key")] = 20.0,
    burst: Annotated[int, typer.Option(help="requests a key may make at once")] = 60,
    no_worker: Annotated[bool, typer.Option("--no-worker", help="do not run build jobs in this process")] = False,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
) -> None:
    """Serve the HTTP API (/v1, docs at /docs), the web tree browser (/ui) and MCP (/mcp)."""

    def go() -> None:
        try:
            import uvicorn

            from knowtree.server.app import create_app
            from knowtree.server.config import MiB, ServerConfig, is_loopback
        except ImportError:
            raise err(_MISSING, 2) from None
        if not is_loopback(host) and not require_keys:
            typer.echo(f"note: {host} is not loopback: every request needs an API key", err=True)
        config = ServerConfig(
            host=host,
            port=port,
            auth="keys" if require_keys else "auto",
            allowed_roots=allow_root or [],
            max_upload_bytes=int(max_upload_mb * MiB),
            rate_per_second=rate,
            rate_burst=burst,
            jobs_worker=not no_worker,
        )
        kt = open_kt(db=db, model=model)
        with kt:
            uvicorn.run(create_app(kt, config), host=host, port=port, log_level=log_level)

    run(go)


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
            raise err(_MISSING, 2) from None
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


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Argument(help="tenant the key acts for (lowercase letters, digits, - _)")],
    db: DbOpt = None,
    label: Annotated[str, typer.Option(help="a note to recognise the key by")] = "",
    read_only: Annotated[bool, typer.Option("--read-only", help="the key can read and ask, not change")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Create an API key (printed once: only its hash is stored)."""

    def go() -> None:
        from knowtree.server.tenancy import KeyStore

        with open_kt(db=db) as kt:
            key, info = KeyStore(kt.store).create(tenant, label=label, read_only=read_only)
        if as_json:
            echo_json({"key": key, **info.__dict__}, indent=None)
        else:
            typer.echo(f"{key}\n(id {info.id}, tenant {info.tenant}{', read-only' if read_only else ''}; "
                       "store it now: it is not shown again)")

    run(go)


@keys_app.command("list")
def keys_list(db: DbOpt = None, tenant: Annotated[str | None, typer.Option()] = None, as_json: JsonOpt = False) -> None:
    """List API keys (ids, tenants, flags; never the keys)."""

    def go() -> None:
        from knowtree.server.tenancy import KeyStore

        with open_kt(db=db, create=False) as kt:
            infos = KeyStore(kt.store).list(tenant)
        if as_json:
            echo_json([i.__dict__ for i in infos])
            return
        if not infos:
            typer.echo("no API keys: knowtree keys create TENANT")
        for i in infos:
            state = f"revoked {i.revoked_at}" if i.revoked_at else "active"
            typer.echo(f"{i.id}\t{i.tenant}\t{'read-only' if i.read_only else 'read-write'}\t{state}\t{i.label}")

    run(go)


@keys_app.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="the key's id (knowtree keys list)")], db: DbOpt = None) -> None:
    """Revoke an API key: requests with it get 401 from now on."""

    def go() -> None:
        from knowtree.server.tenancy import KeyStore

        with open_kt(db=db, create=False) as kt:
            info = KeyStore(kt.store).revoke(key_id)
        typer.echo(f"revoked key {info.id} of tenant {info.tenant}")

    run(go)
