"""The tree commands: `knowtree build`, `enrich`, `ask`, `show`, `trees`, `rm` (registered in `app.py`)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from knowtree.cli.common import echo_json, echo_report, err, open_kt, run
from knowtree.cli.options import (
    BaseUrlOpt,
    DbOpt,
    ExecutorOpt,
    JsonOpt,
    MaxCallsOpt,
    MaxCostOpt,
    MaxTokensOpt,
    ModelOpt,
    QuietOpt,
    RayAddressOpt,
    ThreadsOpt,
    TreeArg,
)


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
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
    quiet: QuietOpt = False,
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
        bool | None, typer.Option(
            "--describe/--no-describe",
            help="describe each document (1 call each) [default: on, off with --summaries none]",
        )
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
        kt = open_kt(
            db=db,
            model=model,
            base_url=base_url,
            threads=threads,
            chunk_size=chunk_size,
            chunk_overlap=overlap,
            concurrency=concurrency,
            executor=executor,
            ray_address=ray_address,
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
                raise err(f"--meta {item!r}: write KEY=VALUE", 2)
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
        echo_report(report, as_json, fallbacks="node(s)")

    run(go, bulk=True)


def enrich(
    tree: TreeArg,
    db: DbOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    threads: ThreadsOpt = None,
    concurrency: Annotated[int | None, typer.Option(help="model calls at once [default: 4]")] = None,
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
    leaves: Annotated[
        bool | None,
        typer.Option(
            "--leaves/--no-leaves",
            help="summarize every leaf too (default: yes; memories: no, one summary per run of messages)",
        ),
    ] = None,
    root: Annotated[bool, typer.Option("--root/--no-root", help="summarize the root too")] = True,
    force: Annotated[
        bool, typer.Option("--force", help="summarize again the nodes that already have a summary")
    ] = False,
    max_calls: MaxCallsOpt = None,
    max_tokens: MaxTokensOpt = None,
    max_cost: MaxCostOpt = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="start a large enrich without asking (see confirm_calls)")
    ] = False,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Add model-written metadata (summaries...) to a tree built with --summaries none (or lazy).

    Bottom-up with the build's prompts; only metadata changes. Nodes already summarized are kept
    unless --force, and each node is stored when done: an interrupted enrich resumes when run again.
    A malformed reply leaves its node as it was (counted). The tree's index is updated for what changed.
    An enrich estimated above confirm_calls asks first, as a build does (--yes, or --max-calls, skips it)."""
    from knowtree.cli.admin import confirm_build
    from knowtree.cli.progress import BuildProgress

    def go() -> None:
        kt = open_kt(
            db=db,
            model=model,
            base_url=base_url,
            threads=threads,
            concurrency=concurrency,
            executor=executor,
            ray_address=ray_address,
            create=False,
            max_calls=max_calls,
            max_tokens=max_tokens,
            max_cost=max_cost,
        )
        with kt, BuildProgress(enabled=not quiet) as bar:
            report = kt.tree(tree).enrich(
                leaves=leaves,
                root=root,
                force=force,
                progress=bar.update,
                on_client=bar.attach,
                confirm=confirm_build(yes, pause=bar),  # asks on a terminal, refuses elsewhere
            )
        echo_report(report, as_json)

    run(go, bulk=True)


def ask(
    tree: TreeArg,
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
            help="auto (the default: retrieve, a collection's documents picked first; search on a structured"
            " tree when expert notes match; on memories as retrieve) | retrieve (the tree as an index, then one answer call)"
            " | nav (the index's scores, the model judging the top few, one answer call)"
            " | walk (navigate with backtracking) | search (one call over the outline)"
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
        typer.Option(
            help="tokens of text to read: tree search [default: 3000], retrieve [default: 2048; memories: 800]"
        ),
    ] = None,
    max_calls: MaxCallsOpt = None,
    max_tokens: MaxTokensOpt = None,
    max_cost: MaxCostOpt = None,
) -> None:
    """Answer a question by navigating the tree; prints the answer, its status and citations."""
    from knowtree.cli.render import render_answer

    def go() -> None:
        kt = open_kt(
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
                raise err("--no-answer goes with --mode retrieve", 2)
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
                    kt,
                    tree,
                    question,
                    as_json=as_json,
                    trace=trace,
                    agent=agent,
                    stream=stream,
                    options=options,
                )
            return
        with kt:
            answer = kt.tree(tree).ask(question, **options)
        if as_json:
            typer.echo(answer.model_dump_json(indent=2))
        else:
            typer.echo(render_answer(answer, trace=trace))

    run(go)


def show(
    tree: TreeArg,
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
        with open_kt(db=db, create=False) as kt:
            t = kt.tree(tree)
            if node:
                n = t.node(node)
                typer.echo(n.model_dump_json(indent=2) if as_json else render_node(n, full=True))
            elif as_json:
                echo_json({"tree": t.info.model_dump(), "nodes": [n.model_dump() for n in t.nodes.values()]})
            else:
                typer.echo(render_outline(t, max_depth=depth))

    run(go)


def trees(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """List the trees in a database."""

    def go() -> None:
        with open_kt(db=db, create=False) as kt:
            infos = kt.trees()
        if as_json:
            echo_json([i.model_dump() for i in infos])
            return
        if not infos:
            typer.echo("no trees yet: knowtree build PATH --tree NAME")
        for i in infos:
            typer.echo(
                f"{i.name}\t{i.documents} doc(s)\t{i.nodes} nodes\t{i.leaves} leaves\tdepth {i.depth}"
                f"\t{i.model}\tupdated {i.updated}"
            )

    run(go)


def rm(
    tree: TreeArg,
    db: DbOpt = None,
    doc: Annotated[
        str | None,
        typer.Option("--doc", help="remove only this document: its stored path, or a unique end of it"),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m", help="--doc on a chunk tree: rebuild with this model [default: the tree's]"
        ),
    ] = None,
    base_url: BaseUrlOpt = None,
    threads: ThreadsOpt = None,
) -> None:
    """Delete a tree, or one document of it (the model-call cache is kept)."""

    def go() -> None:
        with open_kt(db=db, create=False, base_url=base_url, threads=threads) as kt:
            if doc:
                report = kt.remove_document(tree, doc, model=model)
                typer.echo(report.line())
            else:
                kt.delete(tree)
                typer.echo(f"deleted tree {tree!r}")

    run(go)
