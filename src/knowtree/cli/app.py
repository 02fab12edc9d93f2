"""The `knowtree` command: thin, parse → settings → pipeline → print.

This module only builds the typer app and names the command modules (`COMMANDS`; each is
imported when its command runs), one per group of commands: `trees` (build, enrich, ask, show,
trees, rm), `admin` (ledger, sample, models, check), `eval`, `docs` (export, import), `serve`
(serve, mcp), `worker`, `doctor`, and the sub-commands `chat`, `expert`, `keys`, `kb`, `model`, `db`.
Shared options live in `options.py`, shared helpers (errors, opening the database, printing) in
`common.py`; nothing imports this module except the console script (`knowtree.cli.app:main`).

Errors a user can fix print one line naming the file or setting, and exit non-zero; no tracebacks
unless KNOWTREE_DEBUG=1.
"""

from __future__ import annotations

import importlib
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

#: every command: its name → (module, the function or typer app in it), in the order of `knowtree
#: --help`. A command's module is imported only when that command runs (or a listing needs its
#: help): a question does not import the eval, the server, the knowledge bases' commands.
COMMANDS: dict[str, tuple[str, str]] = {
    "build": ("knowtree.cli.trees", "build"),
    "enrich": ("knowtree.cli.trees", "enrich"),
    "ask": ("knowtree.cli.trees", "ask"),
    "show": ("knowtree.cli.trees", "show"),
    "trees": ("knowtree.cli.trees", "trees"),
    "rm": ("knowtree.cli.trees", "rm"),
    "ledger": ("knowtree.cli.admin", "ledger"),
    "sample": ("knowtree.cli.admin", "sample"),
    "models": ("knowtree.cli.admin", "models"),
    "eval": ("knowtree.cli.eval", "eval_command"),
    "export": ("knowtree.cli.docs", "export_command"),
    "import": ("knowtree.cli.docs", "import_command"),
    "serve": ("knowtree.cli.serve", "serve_command"),
    "worker": ("knowtree.cli.worker", "worker_command"),
    "mcp": ("knowtree.cli.serve", "mcp_command"),
    "check": ("knowtree.cli.admin", "check_command"),
    "doctor": ("knowtree.cli.doctor", "doctor_command"),
    "chat": ("knowtree.cli.chat", "chat_app"),
    "expert": ("knowtree.cli.expert", "expert_app"),
    "keys": ("knowtree.cli.keys", "keys_app"),
    "kb": ("knowtree.cli.kb", "kb_app"),
    "model": ("knowtree.cli.model", "model_app"),
    "db": ("knowtree.cli.db", "db_app"),  # with `knowtree db copy` (cli/db_copy.py), added there
}


class LazyGroup(TyperGroup):
    """The root command: lists every name of `COMMANDS` and builds a command (typer's click command
    from the function or sub-app, as `app.command` / `app.add_typer` would) when it is asked for."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.commands[cmd_name] = load_command(cmd_name)
        return self.commands.get(cmd_name)


def load_command(name: str) -> Any:
    """The click command of one entry of `COMMANDS`, built by typer from a one-entry app."""
    module, attr = COMMANDS[name]
    target = getattr(importlib.import_module(module), attr)
    holder = typer.Typer()
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
        return typer.main.get_group_from_info(
            holder.registered_groups[0],
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
            suggest_commands=app.suggest_commands,
        )
    holder.command(name)(target)
    return typer.main.get_command_from_info(
        holder.registered_commands[0],
        pretty_exceptions_short=app.pretty_exceptions_short,
        rich_markup_mode=app.rich_markup_mode,
    )


app = typer.Typer(
    cls=LazyGroup,
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


#: the cyclic garbage collector's thresholds for a `knowtree` process: a full collection after 100
#: collections of the middle generation, not 10. A command's start creates a few hundred thousand
#: objects that live as long as the process (modules, pydantic's validators), and with the default a
#: cold `knowtree ask` on PostgreSQL ran a full collection over all of them: 110-120 ms of its gc time
#: against 45-55 ms (`gc.callbacks`, 3 runs each). Young collections are unchanged, so short-lived
#: cycles are collected as often as before; long-lived ones are found 10x later.
GC_THRESHOLDS = (700, 10, 100)


def main() -> None:
    import gc
    import os

    gc.set_threshold(*GC_THRESHOLDS)  # set before a command's modules are imported (`knowtree` is lazy)
    # pydantic looks for plugins (entry points of the group "pydantic") when the first model is made:
    # a scan of every installed distribution's metadata, ~30 ms of a cold `knowtree ask`. The command
    # runs none; set PYDANTIC_DISABLE_PLUGINS yourself (e.g. to "") to have pydantic load them.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        app()
    except typer.Exit as exc:  # pragma: no cover - typer handles this itself in standalone mode
        sys.exit(exc.exit_code)


if __name__ == "__main__":  # pragma: no cover
    main()
