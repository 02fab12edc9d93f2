"""`knowtree model serve --socket PATH`: one loaded embedded model shared by several processes.

Processes started with `KNOWTREE_MODEL_SOCKET=PATH` (the CLI, `knowtree serve`, an eval) send their
embedded-model calls to it instead of loading the model themselves; it answers one call at a time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from knowtree.cli.common import run
from knowtree.cli.options import ThreadsOpt

model_app = typer.Typer(no_args_is_help=True, help="The embedded model's own process.")


@model_app.command("serve")
def model_serve(
    socket: Annotated[
        Path, typer.Option("--socket", help="the Unix socket to listen on (created mode 0600)")
    ],
    model: Annotated[str, typer.Option("--model", help="'local' or local:PATH.gguf")] = "local",
    threads: ThreadsOpt = None,
    n_ctx: Annotated[int, typer.Option("--n-ctx", help="context window in tokens")] = 8192,
    load: Annotated[bool, typer.Option("--load/--lazy", help="load the model before listening")] = True,
) -> None:
    """Run the embedded model in this process, serving every client of SOCKET (Ctrl-C stops it)."""

    def go() -> None:
        from knowtree.errors import ConfigError
        from knowtree.llm.adapters.llama_engine import LlamaEngine
        from knowtree.llm.adapters.local import LocalModel
        from knowtree.llm.adapters.local_worker import serve_socket

        kind, _, name = model.partition(":")
        if kind != "local":
            raise ConfigError(
                f"knowtree model serve runs the embedded model: use --model local or local:PATH.gguf, not {model!r}"
            )
        engine = LlamaEngine(LocalModel(name or None, n_ctx=n_ctx, n_threads=threads).config())
        if load:
            engine.load()
        info = json.dumps(engine.describe())
        try:
            serve_socket(engine, socket, ready=lambda: typer.echo(f"serving {info} on {socket}", err=True))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {socket}: {exc}") from exc

    run(go, interrupted="the model server stopped")
