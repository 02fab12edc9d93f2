"""`knowtree chat add NAME FILE`: import a conversation into a memory (then `knowtree ask NAME ...`);
`knowtree chat rm NAME --message N`: delete one message (positions of the others never change).

Registered in `app.py` with `app.add_typer(chat_app, name="chat")`. `ask_streaming` is `knowtree ask
--stream` / `--agent` (the `ask` command, in `trees.py`, calls it).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from knowtree.cli.common import echo_report, open_kt, run
from knowtree.cli.options import BaseUrlOpt, DbOpt, JsonOpt, ModelOpt, QuietOpt, ThreadsOpt

chat_app = typer.Typer(
    name="chat",
    no_args_is_help=True,
    help="Conversation memories: import chats, then ask them questions with `knowtree ask NAME`.",
)


@chat_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="memory name (created on first add)")],
    file: Annotated[str, typer.Argument(help="JSONL of messages, OpenAI export JSON, or LoCoMo JSON")],
    db: DbOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    threads: ThreadsOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="auto | jsonl | json | openai | locomo")] = "auto",
    conversation: Annotated[
        str | None, typer.Option("--conversation", help="which conversation of a multi-conversation file")
    ] = None,
    batch: Annotated[
        int | None,
        typer.Option("--batch", help="messages per topic decision, within a session [default: max children]"),
    ] = None,
    max_children: Annotated[
        int | None, typer.Option("--max-children", help="children per topic before it is split [default: 8]")
    ] = None,
    summaries: Annotated[
        str | None,
        typer.Option(help="none: topics by position, no model call (retrievable with ask --mode retrieve)"),
    ] = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Add a chat file's messages to a memory, incrementally (re-running resumes, skipping stored ones)."""
    from knowtree.cli.progress import BuildProgress

    def go() -> None:
        kt = open_kt(
            db=db,
            model=model,
            base_url=base_url,
            threads=threads,
            max_children=max_children,
            summaries=summaries,
        )
        with kt, BuildProgress(enabled=not quiet) as bar:
            report = kt.memory(name).add_file(
                file,
                fmt=fmt,
                conversation=conversation,
                batch_size=batch,
                progress=lambda done, total: bar.update("messages", done, total),
                on_client=bar.attach,
            )
        if not as_json and not report.added:
            typer.echo(
                f"nothing new: all {report.skipped} messages of {file} are already in memory {name!r}"
                f" ({report.messages} messages)"
            )
        else:
            echo_report(report, as_json, fallbacks="topic(s)")

    run(go, bulk=True)


@chat_app.command("rm")
def rm(
    name: Annotated[str, typer.Argument(help="memory name")],
    message: Annotated[int, typer.Option("--message", min=1, help="the position of the message to delete")],
    db: DbOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    threads: ThreadsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete one message: its row and leaf go, the summaries that described it are written again
    (O(depth) model calls); every other message keeps its position. `knowtree rm NAME` deletes it all."""

    def go() -> None:
        with open_kt(db=db, model=model, base_url=base_url, threads=threads, create=False) as kt:
            report = kt.memory(name).delete_message(message)
        if as_json:
            echo_report(report, True)
        else:
            typer.echo(report.line())

    run(go)


def ask_streaming(
    kt: object,
    tree: str,
    question: str,
    *,
    as_json: bool,
    trace: bool,
    agent: bool,
    stream: bool,
    options: dict[str, Any] | None = None,
) -> None:
    """`knowtree ask NAME Q --stream`: navigation events as they happen, then the answer's text.

    Conversation memories stream through `Memory.stream`; document trees print their walk's steps
    from the navigator's event hook. With --json every event is one JSON line. `options`: the
    `Tree.ask` keywords (mode, strategy, budget_tokens...): streaming runs the same plan.
    """
    import asyncio

    from knowtree.cli.render import render_answer
    from knowtree.types import Answer, NavStep

    def show_step(step: NavStep) -> None:
        if as_json:
            typer.echo(json.dumps({"event": "step", "step": step.model_dump()}))
            return
        where = f" {step.source}" if step.source else ""
        what = step.outcome or step.reason
        typer.echo(f"» {step.action}{where}{': ' + what[:160] if what else ''}")

    def show_answer(answer: Answer) -> None:
        if as_json:
            typer.echo(json.dumps({"event": "answer", "answer": answer.model_dump()}))
        else:
            typer.echo("")
            typer.echo(render_answer(answer, trace=trace))

    options = options or {}
    t = kt.tree(tree)  # type: ignore[attr-defined]
    if t.info.kind != "conversation":
        if agent:
            raise typer.BadParameter("--agent works on conversation memories (knowtree chat add)")
        show_answer(t.ask(question, on_step=show_step, **options))
        return
    mem = kt.memory(tree)  # type: ignore[attr-defined]
    navigator = "agent" if agent else None
    if not stream:  # --agent alone: printed like any answer
        answer = mem.ask(
            question, mode=options.get("mode"), navigator=navigator, budget_tokens=options.get("budget_tokens")
        )
        typer.echo(answer.model_dump_json(indent=2) if as_json else render_answer(answer, trace=trace))
        return

    async def consume() -> None:
        writing = False  # answer text is on the current line
        async for event in mem.stream(
            question, mode=options.get("mode"), navigator=navigator, budget_tokens=options.get("budget_tokens")
        ):
            if event["event"] == "token":
                if as_json:
                    typer.echo(json.dumps(event))
                else:
                    typer.echo(event["text"], nl=False)
                    writing = True
                continue
            if writing:
                typer.echo("")
                writing = False
            if event["event"] == "step":
                show_step(event["step"])
            else:
                show_answer(event["answer"])

    asyncio.run(consume())
