"""`knowtree keys create|list|revoke`: API keys of the tenants of `knowtree serve` (only hashes stored)."""

from __future__ import annotations

from typing import Annotated

import typer

from knowtree.cli.common import echo_json, open_kt, run
from knowtree.cli.options import DbOpt, JsonOpt

keys_app = typer.Typer(no_args_is_help=True, help="API keys for `knowtree serve` (one tenant per key group).")


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
