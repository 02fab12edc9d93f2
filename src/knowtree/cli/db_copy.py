"""`knowtree db copy SRC DST`: a store copied into another (SQLite file or postgresql:// URL, either
way), verified table by table. The work is `knowtree.store.copy`; this prints its report.

Registered on the `db` command group in `db.py` (`db_app.command("copy")(copy_command)`).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from knowtree.cli.common import echo_json, err, run
from knowtree.cli.options import JsonOpt


def open_store(spec: str, *, must_exist: bool) -> Any:
    """The store named by `spec`: a postgresql:// URL or an SQLite file (a source must exist)."""
    from pathlib import Path

    from knowtree.errors import UserError
    from knowtree.store import open_store
    from knowtree.store.dialect import is_url

    if must_exist and not is_url(spec) and not Path(spec).exists():
        raise UserError(f"{spec}: no such database file to copy from")
    return open_store(spec)


def copy_command(
    src: Annotated[str, typer.Argument(help="the store to copy from: an SQLite file or a postgresql:// URL")],
    dst: Annotated[str, typer.Argument(help="the store to copy into (an SQLite file is created if missing)")],
    batch: Annotated[int, typer.Option("--batch", min=1, help="rows read and written at a time")] = 1000,
    as_json: JsonOpt = False,
) -> None:
    """Copy every table of SRC into DST, then verify row counts and content hashes per table.

    Resumable: run it again after an interruption. Nothing already in DST is overwritten: a row of
    DST under a copied key that holds other data stops the copy, naming the table and the key.
    Exits 1 when a table's counts or hashes differ."""
    from knowtree.store.copy import copy_store

    def body() -> Any:
        source = open_store(src, must_exist=True)
        try:
            dest = open_store(dst, must_exist=False)
            try:
                report = copy_store(source, dest, batch=batch)
                if report.ok:  # a copied large tree's approximate index (rows are copied, not indexes)
                    from knowtree.retrieve.indexwrite import write_ann_indexes

                    write_ann_indexes(dest)
                return report
            finally:
                dest.close()
        finally:
            source.close()

    report = run(body, interrupted="what was written is kept: run the same command again to resume")
    if as_json:
        tables = [{**t.__dict__, "ok": t.ok} for t in report.tables]
        data = {
            "source": src,
            "destination": dst,
            "ok": report.ok,
            "tables": tables,
            "skipped": report.skipped,
        }
        echo_json(data, indent=None)
    else:
        typer.echo(f"{'table':<18} {'source':>9} {'written':>9} {'dest':>9}  {'sha256 (source)':<16}  check")
        for t in report.tables:
            mark = "ok" if t.ok else f"DIFFERS (dest sha256 {t.dest_hash[:16]})"
            typer.echo(
                f"{t.name:<18} {t.source_rows:>9} {t.written:>9} {t.dest_rows:>9}  {t.source_hash[:16]:<16}  {mark}"
            )
        if report.skipped:
            typer.echo(
                f"not copied: {', '.join(report.skipped)} (flat passage indexes are SQLite tables;"
                " an evaluation re-indexes its corpus on its next run)"
            )
        typer.echo(
            f"copied {src} -> {dst}: {report.rows} row(s) verified" if report.ok else "copy NOT verified"
        )
    if not report.ok:
        bad = ", ".join(t.name for t in report.tables if not t.ok)
        raise err(f"{dst}: tables differ from {src} after the copy: {bad}", 1)
