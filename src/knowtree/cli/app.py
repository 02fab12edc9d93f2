"""The `knowtree` command: thin, parse → settings → pipeline → print.

This module only builds the typer app and registers the command modules, one per group of
commands: `trees` (build, enrich, ask, show, trees, rm), `admin` (ledger, sample, models, check), `eval`,
`docs` (export, import), `serve` (serve, mcp), `doctor`, and the sub-commands `chat`, `expert`, `keys`,
`kb`, `model`, `db`.
Shared options live in `options.py`, shared helpers (errors, opening the database, printing) in
`common.py`; nothing imports this module except the console script (`knowtree.cli.app:main`).

Errors a user can fix print one line naming the file or setting, and exit non-zero; no tracebacks
unless KNOWTREE_DEBUG=1.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from knowtree.cli import admin, chat, db, docs, doctor, expert, kb, keys, model, serve, trees
from knowtree.cli.eval import eval_command

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Build navigable knowledge trees from documents and answer questions by navigating them.",
)


def _version(value: bool) -> None:
    if value:
        from knowtree import __version__

        typer.echo(f"knowtree {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """Build navigable knowledge trees from documents and answer questions by navigating them."""


# the order here is the order of `knowtree --help`
for _name, _command in (
    ("build", trees.build),
    ("enrich", trees.enrich),
    ("ask", trees.ask),
    ("show", trees.show),
    ("trees", trees.trees),
    ("rm", trees.rm),
    ("ledger", admin.ledger),
    ("sample", admin.sample),
    ("models", admin.models),
    ("eval", eval_command),
    ("export", docs.export_command),
    ("import", docs.import_command),
    ("serve", serve.serve_command),
    ("mcp", serve.mcp_command),
    ("check", admin.check_command),
    ("doctor", doctor.doctor_command),
):
    app.command(_name)(_command)
app.add_typer(chat.chat_app, name="chat")
app.add_typer(expert.expert_app, name="expert")
app.add_typer(keys.keys_app, name="keys")
app.add_typer(kb.kb_app, name="kb")
app.add_typer(model.model_app, name="model")
app.add_typer(db.db_app, name="db")


def main() -> None:
    try:
        app()
    except typer.Exit as exc:  # pragma: no cover - typer handles this itself in standalone mode
        sys.exit(exc.exit_code)


if __name__ == "__main__":  # pragma: no cover
    main()
