"""`knowtree eval KIND PATH --method M[,M...]`: the evaluation harness on the command line.

Registered in `app.py` with `app.command("eval")(eval_command)`. `knowtree_eval` (the `eval` extra)
is imported only when the command runs, so `knowtree --help` neither needs nor loads it.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from knowtree.cli.common import run


def eval_command(
    kind: Annotated[str, typer.Argument(help="quality | locomo | financebench | hotpotqa | jsonl")],
    path: Annotated[str, typer.Argument(help="the dataset file (financebench: the questions file)")],
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help="method(s), comma-separated: bm25, embedding (LLM-free unless --model is given: then they "
            "also answer), hybrid, tree (LLM-free tree as an index), walk, search, flat, memwalker, fulltext, raptor, "
            "nav, nav-judge, retrieve (tree + one answer call), tree-summarized / retrieve-summarized / nav-summarized (on a tree "
            "whose inner nodes the model summarized first), nav-overview (its summaries shown to the reader), "
            "nav-one-query (nav searching a multiple-choice question without a search per option; nav-options: "
            "nav's old name for that search), closed-book (the reader with no text) (need a model; default: "
            "the configured one)",
        ),
    ] = "bm25",
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="model for LLM methods (same forms as `knowtree models`)"),
    ] = None,
    judge: Annotated[
        str | None,
        typer.Option("--judge", help="judge free-form answers with this model ('same': the --model)"),
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="only the first N questions")] = None,
    corpora: Annotated[
        int | None,
        typer.Option(
            "--corpora", help="only the questions of the first N corpora (articles, conversations…)"
        ),
    ] = None,
    corpus: Annotated[
        str | None, typer.Option("--corpus", help="only these corpora, comma-separated (e.g. conv-30)")
    ] = None,
    per_corpus: Annotated[
        int | None, typer.Option("--per-corpus", help="only the first N questions of each corpus")
    ] = None,
    out: Annotated[
        str, typer.Option("--out", "-o", help="output directory (results.jsonl, run.json, summary.md)")
    ] = "eval-out",
    k: Annotated[int, typer.Option("--k", "-k", help="passages retrieved per question")] = 5,
    db: Annotated[
        str | None, typer.Option("--db", help="SQLite file (or postgresql:// URL) keeping indexes between runs")
    ] = None,
    pages: Annotated[
        str | None,
        typer.Option("--pages", help="financebench: the pages file (default: the one next to PATH)"),
    ] = None,
    budget: Annotated[int, typer.Option("--budget", help="token budget for recall@budget")] = 2048,
    seed: Annotated[int, typer.Option("--seed", help="seed recorded for (and passed to) methods")] = 0,
    embedder: Annotated[
        str,
        typer.Option(
            "--embedder",
            help="embedding model: default (m2v-minilm), minilm, minilm-l3, wordllama, static (64-dim) or hash (test fake)",
        ),
    ] = "default",
    skip: Annotated[
        int | None,
        typer.Option("--skip", help="leave out the first N questions (after --corpus/--per-corpus; before --limit)"),
    ] = None,
    nav: Annotated[
        str | None,
        typer.Option(
            "--nav",
            help="options of nav / nav-judge, e.g. 'rounds=1,candidates=8,snippet_chars=240' "
            "(candidates, rounds, weight, snippet_chars, first=edge|top, soft…)",
        ),
    ] = None,
    choice_reads: Annotated[
        int | None,
        typer.Option(
            "--choice-reads",
            help="multiple choice: read each question N times with its options rotated and answer with the "
            "option of the highest mean letter probability, which offsets a reader's lean towards some "
            "letters (default 2; 1: one reading; more than one needs log-probabilities, as the embedded "
            "model gives)",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar or lines")] = False,
) -> None:
    """Evaluate methods on a benchmark; prints accuracy, hit rate and tokens read, saves the details.

    Running the same command again resumes: questions already in OUT/results.jsonl are not re-asked.
    """
    from knowtree.cli.progress import EvalProgress
    from knowtree_eval.runner import RESULTS, SUMMARY, headline, run_eval

    bar = EvalProgress() if not quiet and sys.stderr.isatty() else None

    def go() -> dict:
        try:
            return run_eval(
                kind,
                path,
                method,
                out,
                limit=limit,
                model=model,
                seed=seed,
                k=k,
                budget=budget,
                pages=pages,
                db=db,
                progress=not quiet,
                argv=["knowtree", *sys.argv[1:]],
                judge=judge,
                corpora=corpora,
                per_corpus=per_corpus,
                corpus=corpus,
                embedder=embedder,
                skip=skip,
                nav=nav,
                **({"choice_reads": choice_reads} if choice_reads is not None else {}),
                on_tick=bar.tick if bar else None,
            )
        finally:
            if bar:
                bar.stop()

    summary = run(
        go, interrupted=f"finished questions are in {out}/{RESULTS}; run the same command again to resume"
    )
    typer.echo(
        f"{summary['kind']}: {summary['questions']} question(s); "
        f"results in {out}/{RESULTS}, summary in {out}/{SUMMARY}"
    )
    for line in headline(summary):
        typer.echo(line)
