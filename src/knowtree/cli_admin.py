"""`knowtree check`: is a database file sound? (`PRAGMA integrity_check` + the full-text index check)."""

from __future__ import annotations

import json

import typer

from knowtree.cli import DbOpt, JsonOpt, _run


def check_command(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Check a database file thoroughly (read-only): SQLite's integrity check and the full-text
    index's. Exits 3 when something is wrong; the file is never changed."""
    from knowtree.config import Settings
    from knowtree.store.guard import full_check

    def go() -> None:
        path = Settings.load({"db": db}).db
        report = full_check(path)
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

    _run(go)
