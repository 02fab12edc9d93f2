"""`knowtree kb build|add|ask|show|export`: knowledge bases (AutoKB) from raw issues and documents.

Registered in `app.py` with `app.add_typer(kb_app, name="kb")`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from knowtree.cli.common import echo_json, echo_report, open_kt, run
from knowtree.cli.options import (
    BaseUrlOpt,
    DbOpt,
    JsonOpt,
    ModelOpt,
    QuietOpt,
    RayAddressOpt,
    ThreadsOpt,
)
from knowtree.errors import UserError
from knowtree.text import clip

kb_app = typer.Typer(
    name="kb",
    no_args_is_help=True,
    help="Knowledge bases: raw user issues + product or domain documents → de-duplicated issues with "
    "compliant, cited solutions; then answer a user's issue with the solution for their situation.",
)

EmbedderOpt = Annotated[str | None, typer.Option("--embedder", help="static (default) | hash[:DIM] (tests)")]
NameArg = Annotated[str, typer.Argument(help="knowledge base name")]
KBExecutorOpt = Annotated[
    str | None,
    typer.Option(
        "--executor",
        help="local (calls one after another in this process) | ray (each stage's independent calls: chunk "
        "contexts, theme and subtree batches, solutions, as Ray tasks) [default: local]",
    ),
]

#: what an interrupted kb command says (its model calls are cached like a build's)
_INTERRUPTED = "finished model calls are cached, run the same command again"


@kb_app.command("build")
def build(
    name: NameArg,
    issues: Annotated[str, typer.Option("--issues", help="raw issues: JSONL or CSV")],
    docs: Annotated[
        list[str],
        typer.Option(
            "--docs", help="domain documents (repeatable): JSONL records, text, Markdown, PDF, DOCX, HTML"
        ),
    ],
    attributes: Annotated[str, typer.Option("--attributes", help="attribute configuration (TOML or YAML)")],
    rules: Annotated[str, typer.Option("--rules", help="domain rules (TOML, or text: one rule a line)")],
    solutions: Annotated[
        str, typer.Option("--solutions", help="eager | lazy (generated at the first ask)")
    ] = "lazy",
    context: Annotated[
        str, typer.Option("--context", help="chunk context: path (no model) | model (one call a chunk)")
    ] = "path",
    threshold: Annotated[
        float | None, typer.Option("--threshold", help="cluster similarity threshold [default: 0.6]")
    ] = None,
    themes: Annotated[
        str,
        typer.Option(
            "--themes",
            help="how clusters get a theme: similarity (nearest theme name, no call) | model (1 call per 20 clusters)",
        ),
    ] = "similarity",
    replace: Annotated[bool, typer.Option("--replace", help="rebuild a KB that already exists")] = False,
    db: DbOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    threads: ThreadsOpt = None,
    embedder: EmbedderOpt = None,
    executor: KBExecutorOpt = None,
    ray_address: RayAddressOpt = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Build a knowledge base: chunks, themes, clusters, parent/child issues, (eager) solutions."""
    from knowtree.cli.progress import BuildProgress

    def go() -> None:
        options: dict[str, Any] = {"context": context, "theme_assign": themes}
        if threshold is not None:
            options["threshold"] = threshold
        kt = open_kt(
            db=db, model=model, base_url=base_url, threads=threads, executor=executor, ray_address=ray_address
        )
        with kt, BuildProgress(enabled=not quiet) as bar:
            report = kt.kb(name, embedder=embedder).build(
                issues=issues,
                docs=docs,
                attributes=attributes,
                rules=rules,
                solutions=solutions,
                replace=replace,
                progress=bar.update,
                on_client=bar.attach,
                **options,
            )
        echo_report(report, as_json)

    run(go, interrupted=_INTERRUPTED, bulk=True)


@kb_app.command("add")
def add(
    name: NameArg,
    issues: Annotated[str | None, typer.Option("--issues", help="new raw issues: JSONL or CSV")] = None,
    docs: Annotated[
        list[str] | None, typer.Option("--docs", help="new domain documents (repeatable)")
    ] = None,
    db: DbOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    threads: ThreadsOpt = None,
    executor: KBExecutorOpt = None,
    ray_address: RayAddressOpt = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Add raw issues (they join clusters or open new ones) and/or documents (affected solutions re-grounded)."""
    from knowtree.cli.progress import BuildProgress

    def go() -> None:
        kt = open_kt(
            db=db,
            model=model,
            base_url=base_url,
            threads=threads,
            executor=executor,
            ray_address=ray_address,
            create=False,
        )
        with kt, BuildProgress(enabled=not quiet) as bar:
            report = kt.kb(name).add(
                issues=issues, docs=docs or None, progress=bar.update, on_client=bar.attach
            )
        if as_json:
            echo_report(report, True)
        else:
            typer.echo(
                f"added to {name!r}: {report.raw_issues} new raw issues ({report.joined} joined existing clusters, "
                f"{report.clusters} new clusters → {report.parents} parent + {report.children} child issues; "
                f"{report.skipped} already present), {report.chunks} new chunks, {report.restale} solutions "
                f"to re-ground; {report.usage.calls} model calls, {report.seconds:.1f}s"
            )

    run(go, interrupted=_INTERRUPTED, bulk=True)


@kb_app.command("rules")
def rules(
    name: NameArg,
    rules_file: Annotated[
        str | None, typer.Option("--rules", help="the new domain rules: TOML or text (without it: show the rules)")
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a KB's domain rules, or replace them (--rules FILE); stored solutions are kept and
    regenerated under the new rules at their next ask."""

    def go() -> None:
        kt = open_kt(db=db, create=False)
        with kt:
            kb = kt.kb(name)
            if rules_file is None:
                current = kb.rules()
                if as_json:
                    echo_json([r.__dict__ for r in current])
                    return
                for r in current:
                    typer.echo(f"{r.id}: {r.text}")
                    for key in ("forbidden", "required"):
                        if getattr(r, key):
                            typer.echo(f"    {key}: {', '.join(getattr(r, key))}")
                    for key in ("question", "append", "threshold"):
                        if getattr(r, key):
                            typer.echo(f"    {key}: {getattr(r, key)}")
                    if not r.judged:
                        typer.echo("    judged: no (checked by its phrases only)")
                return
            marked = kb.set_rules(rules_file)
            count = len(kb.rules())
        if as_json:
            echo_json({"kb": name, "rules": count, "stale": marked})
            return
        typer.echo(
            f"rules of {name!r} replaced from {rules_file}; {marked} stored solutions marked stale "
            "(regenerated and checked under the new rules at their next ask)"
        )

    run(go)


@kb_app.command("ask")
def ask(
    name: NameArg,
    query: Annotated[str, typer.Argument(help="the user's issue")],
    k: Annotated[int, typer.Option("--k", help="semantic top-k issues checked by metadata")] = 5,
    metadata: Annotated[
        str,
        typer.Option(
            "--metadata",
            help="auto (keywords where the attribute configuration gives keywords, else model) | model | keywords | none",
        ),
    ] = "auto",
    no_solution: Annotated[
        bool, typer.Option("--no-solution", help="retrieve only; generate no solution")
    ] = False,
    rerank: Annotated[
        bool,
        typer.Option(
            "--rerank",
            help="one more model call: the model grades the top 5 issues yes/no and they are reordered. "
            "Off by default: with the embedded 1.5B model it lowered HitRate@1 on TV (0.483 to 0.414) "
            "and medical (0.830 to 0.812) (benchmarks/RESULTS.md, AutoKB rerank); meant for stronger models",
        ),
    ] = False,
    trace: Annotated[bool, typer.Option("--trace", help="print the retrieval steps")] = False,
    passages: Annotated[
        int,
        typer.Option(
            "--passages", min=0, max=50, help="document passages for the query itself, beside the solution (0: none)"
        ),
    ] = 3,  # answer.kb.PASSAGES, written out: importing it would load the KB index at every start
    db: DbOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    threads: ThreadsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a user's issue: the matched KB issue, match type, metadata, solution and citations."""

    def go() -> None:
        with open_kt(db=db, model=model, base_url=base_url, threads=threads, create=False) as kt:
            answer = kt.kb(name).ask(
                query, k=k, metadata=metadata, solve=not no_solution, rerank=rerank, passages=passages
            )
        data = answer.to_dict()
        if as_json:
            echo_json(data, ensure_ascii=False)
            return
        issue = data["issue"]
        if issue is None:
            typer.echo("no matching issue in the knowledge base")
            _echo_passages(data["passages"])
            return
        meta = ", ".join(f"{a}={v}" for a, v in issue["metadata"].items() if v != "any") or "general"
        typer.echo(
            f"issue: {issue['title']}  [{issue['kind']} {issue['id']}, match: {data['match']}, {meta}]"
        )
        if data["solution"]:
            typer.echo(f"\n{data['solution']}\n")
            for c in data["citations"]:
                typer.echo(f'  [{c["doc_id"]}] "{c["quote"]}"')
            broken = "; ".join(f"{v['rule']}: {v['detail']}" for v in data["violations"])
            typer.echo(f"status: {data['status']}" + (f" (breaks {broken})" if broken else ""))
        _echo_passages(data["passages"])
        if trace:
            for step in data["trace"]:
                typer.echo(f"  · {json.dumps(step, ensure_ascii=False)}")

    run(go, interrupted=_INTERRUPTED)


def _echo_passages(passages: list[dict[str, Any]]) -> None:
    if passages:
        typer.echo("\npassages for this question:")
    for p in passages:
        where = " > ".join(p["path"]) or p["doc_id"]
        typer.echo(f"  [{p['doc_id']}] {where}: {clip(p['text'], 160)}")


@kb_app.command("show")
def show(
    name: NameArg,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Themes → parent issues → child issues, with metadata, solution status and compliance."""

    def go() -> None:
        with open_kt(db=db, create=False) as kt:
            data = kt.kb(name).show()
        if as_json:
            echo_json(data, ensure_ascii=False)
            return
        typer.echo(
            f"{data['name']}: {data['domain']} — {data['raw_issues']} raw issues, {data['chunks']} chunks"
        )
        for theme in data["themes"]:
            typer.echo(f"\n■ {theme['name']} ({len(theme['parents'])} issues)")
            for p in theme["parents"]:
                typer.echo(
                    f"  ● {p['title']}  [{_meta(p['metadata'])}; {p['cluster_size']} raw; {_status(p)}]"
                )
                for c in p["children"]:
                    typer.echo(
                        f"      ○ {c['title']}  [{_meta(c['metadata'])}; {c['raw_issues']} raw; {_status(c)}]"
                    )

    run(go, interrupted=_INTERRUPTED)


def _meta(meta: dict[str, str]) -> str:
    return ", ".join(f"{a}={v}" for a, v in meta.items() if v != "any") or "general"


def _status(node: dict[str, Any]) -> str:
    if node["status"] == "pending":
        return "solution: pending (lazy)"
    broken = f", {len(node['violations'])} violation(s)" if node["violations"] else ""
    return f"solution: {node['status']}, {node['citations']} citation(s){broken}"


@kb_app.command("export")
def export(
    name: NameArg,
    fmt: Annotated[str, typer.Option("--format", help="jsonl | json")] = "jsonl",
    db: DbOpt = None,
) -> None:
    """Every KB issue with its members (raw issue ids), metadata, solution and citations."""

    def go() -> None:
        if fmt not in ("jsonl", "json"):
            raise UserError(f"unknown format {fmt!r} (jsonl | json)")
        with open_kt(db=db, create=False) as kt:
            rows = kt.kb(name).export()
        if fmt == "json":
            echo_json(rows, ensure_ascii=False)
        else:
            for row in rows:
                typer.echo(json.dumps(row, ensure_ascii=False))

    run(go, interrupted=_INTERRUPTED)
