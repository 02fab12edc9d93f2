"""`knowtree expert add|list|remove`: expert notes the navigator is shown for questions they match."""

from __future__ import annotations

from typing import Annotated

import typer

from knowtree.cli.common import echo_json, open_kt, run
from knowtree.cli.options import DbOpt, JsonOpt

expert_app = typer.Typer(help="Expert notes: where to look for which questions, per tree or for all ('*').")


@expert_app.command("add")
def expert_add(
    text: Annotated[str, typer.Argument(help='the note, e.g. "for EBITDA adjustments look at MD&A"')],
    tree: Annotated[
        str, typer.Option("--tree", "-t", help="the tree (or collection) it is for; '*' for all")
    ] = "*",
    db: DbOpt = None,
) -> None:
    """Add an expert note; it is shown to the navigator for questions it matches."""
    from knowtree.store.docinfo import add_expert

    def go() -> None:
        with open_kt(db=db, create=False) as kt:
            if tree != "*":
                kt.store.tree_info(tree)  # an unknown tree is an error, not a silent note
            note = add_expert(kt.store, tree, text)
        typer.echo(f"added expert note {note.id} for {tree!r}")

    run(go)


@expert_app.command("list")
def expert_list(
    tree: Annotated[
        str | None, typer.Option("--tree", "-t", help="only notes that apply to this tree")
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List expert notes."""
    from knowtree.store.docinfo import list_experts

    def go() -> None:
        with open_kt(db=db, create=False) as kt:
            notes = list_experts(kt.store, tree)
        if as_json:
            echo_json([n.__dict__ for n in notes])
            return
        if not notes:
            typer.echo("no expert notes yet: knowtree expert add TEXT --tree NAME")
        for n in notes:
            typer.echo(f"{n.id}\t{n.scope}\t{n.text}")

    run(go)


@expert_app.command("remove")
def expert_remove(
    note_id: Annotated[int, typer.Argument(help="the note's id (see `knowtree expert list`)")],
    db: DbOpt = None,
) -> None:
    """Remove an expert note."""
    from knowtree.store.docinfo import remove_expert

    def go() -> None:
        with open_kt(db=db, create=False) as kt:
            remove_expert(kt.store, note_id)
        typer.echo(f"removed expert note {note_id}")

    run(go)
