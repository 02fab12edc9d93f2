"""CLI pieces for keeping a database safe: `knowtree check`, and the confirmation a large build asks.

Imports nothing from `knowtree.cli.app` (which registers `check_command` in one line).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from knowtree.construct.estimate import BuildEstimate


def confirm_build(yes: bool, pause: Any = None) -> Callable[[BuildEstimate], bool]:
    """The CLI's answer to a build estimated above `confirm_calls`: --yes proceeds, a terminal is
    asked, anything else (a script, a pipe) is refused with the estimate and how to proceed.
    `pause`: a progress display with pause()/resume(), hidden while asking."""
    from knowtree.errors import UserError

    def confirm(estimate: BuildEstimate) -> bool:
        if yes:
            return True
        if not sys.stdin.isatty():
            raise UserError(
                f"{estimate.line()}: pass --yes to start it without a terminal, or cap it with --max-calls"
            )
        if pause is not None:
            pause.pause()
        try:
            return typer.confirm(f"{estimate.line()}. Start it?", default=False, err=True)
        finally:
            if pause is not None:
                pause.resume()

    return confirm


def check_command(
    db: Annotated[
        str | None, typer.Option("--db", help="SQLite database file [default: ./knowtree.db]")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Check a database file thoroughly (read-only): SQLite's integrity check and the full-text
    index's. Exits 3 when something is wrong; the file is never changed."""
    from knowtree.config import Settings
    from knowtree.errors import KnowtreeError
    from knowtree.store.guard import full_check

    try:
        path = Settings.load({"db": db}).db
        report = full_check(path)
    except KnowtreeError as exc:
        if os.environ.get("KNOWTREE_DEBUG"):
            raise
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3) from None
    if as_json:
        typer.echo(
            json.dumps({"db": path, "ok": report.ok, "problems": report.problems, "trees": report.trees})
        )
    elif report.ok:
        typer.echo(
            f"{path}: ok ({report.trees} tree(s), {report.pages} pages; integrity and full-text index checked)"
        )
    else:
        for problem in report.problems:
            typer.echo(f"{path}: {problem}", err=True)
    if not report.ok:
        raise typer.Exit(3)
