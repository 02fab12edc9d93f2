"""`knowtree db start|stop --dir DIR`: a local PostgreSQL (store/pgserver.py) for `--db URL`; and
`knowtree db copy` (cli/db_copy.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from knowtree.cli.common import run
from knowtree.cli.db_copy import copy_command

db_app = typer.Typer(no_args_is_help=True, help="A local PostgreSQL for `--db postgresql://…`.")
DirOpt = Annotated[str, typer.Option("--dir", help="directory holding the database's files")]


def _say(line: str) -> None:
    typer.echo(line, err=True)


@db_app.command("start")
def start_command(directory: DirOpt) -> None:
    """Start (or reuse) a PostgreSQL with pgvector whose data lives in DIR; print its URL (last line)."""
    from knowtree.store import pgserver

    typer.echo(run(lambda: pgserver.start(directory, say=_say)))


@db_app.command("stop")
def stop_command(directory: DirOpt) -> None:
    """Stop the PostgreSQL whose data lives in DIR."""
    from knowtree.store import pgserver

    stopped = run(lambda: pgserver.stop(directory, say=_say))
    typer.echo("stopped" if stopped else "not running")


db_app.command("copy")(copy_command)  # `knowtree db copy`, kept in cli/db_copy.py
