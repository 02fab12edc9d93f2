"""Options shared by the `knowtree` commands, declared once (typer `Annotated` types).

Every command module imports its shared options from here; options used by one command stay beside it.
"""

from __future__ import annotations

from typing import Annotated

import typer

DbOpt = Annotated[
    str | None, typer.Option("--db", help="SQLite file or postgresql:// URL [default: ./knowtree.db]")
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", help="local | openai:MODEL[@URL] | ollama:MODEL | anthropic:MODEL | keyword"
    ),
]
BaseUrlOpt = Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible server URL")]
ThreadsOpt = Annotated[int | None, typer.Option("--threads", help="CPU threads for the embedded model")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="no progress output")]
TreeArg = Annotated[str, typer.Argument(help="tree name")]
# budget caps, per build / per question (also settings: max_calls, max_tokens, max_cost)
MaxCallsOpt = Annotated[
    int | None, typer.Option("--max-calls", help="stop before more than this many model calls")
]
MaxTokensOpt = Annotated[
    int | None, typer.Option("--max-tokens", help="stop before more than this many tokens (in + out)")
]
MaxCostOpt = Annotated[
    float | None, typer.Option("--max-cost", help="stop before spending more than this many USD")
]
ExecutorOpt = Annotated[
    str | None,
    typer.Option(help="local (threads in this process) | ray (model calls as Ray tasks) [default: local]"),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        help="with --executor ray: auto | HOST:PORT | ray://HOST:PORT [default: RAY_ADDRESS, else a local cluster]"
    ),
]
