"""Eval method `nav`: score-guided navigation (`knowtree.answer.nav`) over the same tree and index as `tree`.

The tree, index, embedder and scoring are `tree`'s (`TreeMethod`), so the two differ only by the
model's judgments. Budget metrics (`hit_b1024`…) are computed on the final ranking exactly as for
`tree`; with a model given (`answer`), the ranking packed into `budget` tokens is answered in one
call (the reader every retrieval method shares), so QuALITY accuracy compares with `fulltext`.
`nav-judge` is the same without the answer call (retrieval only). The record counts every model
request (judge rounds + answer), sequential round trips and wall time; `tokens_read` is what the model read of the corpus: the snippets judged plus the evidence.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from knowtree.answer.nav import NavOptions
from knowtree_eval.base import CorpusContext, MethodParams, Record
from knowtree_eval.datasets import Case
from knowtree_eval.scoring import account, base_record, retrieval_metrics, score_answer
from knowtree_eval.treemethod import TreeMethod


@dataclass
class NavMethod(TreeMethod):
    name: str = "nav"
    answer: bool = False
    options: NavOptions = field(default_factory=NavOptions)

    def run(self, case: Case, ctx: CorpusContext) -> Record:
        from knowtree.answer.nav import NavResult, judged_beam

        started = time.perf_counter()
        built = self.built(ctx)
        asked = case.prompt()  # with a multiple-choice question's options, as the reader sees it
        runtime = ctx.need_runtime()
        record = base_record(case, self.name)
        with runtime.question("eval", f"{self.name}:{case.corpus}", case.question) as (client, run_id):
            # the product's sequence (`knowtree ask --mode nav`): rank, the judged beam, pack the budget
            found = self.search(
                built,
                asked,
                judged_beam(client, asked, self.options, budget_tokens=self.evidence_budget(built)),
            )
            if self.answer:
                self.answer_from(found.evidence, case, client, record, runtime.choice_reads, built)
            else:
                record.tokens_read = sum(ev.tokens for ev in found.evidence)
            account(record, client, run_id)
        nav = found.reranked
        assert isinstance(nav, NavResult)
        ranked = [built.piece_passage[p] for p in found.ranking.pieces]
        lengths = [built.piece_tokens[p] for p in found.ranking.pieces]
        record.retrieved = list(dict.fromkeys(ranked[: self.k]))
        record.metrics = retrieval_metrics(case, ctx, ranked, k=self.k, budget=self.budget, lengths=lengths)
        record.metrics["judge_fallbacks"] = float(nav.fallbacks)
        record.metrics["graded_yes"] = float(sum(1 for g in nav.grades.values() if g > 0.5))
        if self.answer:
            score_answer(record, case)
        record.tokens_read += nav.shown_chars // 4  # the judged snippets were read too
        record.status = "fallback" if nav.fallbacks else "judged"
        record.wall_s = time.perf_counter() - started
        return record


def nav_method(
    p: MethodParams,
    *,
    judge_only: bool = False,
    summarize: bool = False,
    overview: bool = False,
    choices: bool = True,
    name: str | None = None,
) -> NavMethod:
    """`nav` (judge rounds + one answer call when the run has a model), or `nav-judge`: the judged
    ranking alone (its budget hit rates and judge cost, no answer call). `summarize`
    (`nav-summarized`): over the tree whose inner nodes the run's model summarized first (what a
    user's default build gives; `retrieve-summarized`'s tree, the summaries shared through the
    cache). `overview` (`nav-overview`): the summarized tree's inner summaries are shown to the
    reader before the evidence, out of its budget. `choices` False (`nav-one-query`): a
    multiple-choice question is searched with the question alone, not once more per option.
    `p.extra["nav"]` (a `NavOptions`, from `knowtree eval --nav`) replaces the default options."""
    options = p.extra.get("nav") or NavOptions()
    if judge_only:
        return NavMethod(k=p.k, budget=p.budget, answer=False, name="nav-judge", options=options)
    default = "nav-overview" if overview else "nav-summarized" if summarize else "nav"
    return NavMethod(
        k=p.k,
        budget=p.budget,
        answer=p.answer,
        options=options,
        summarize=summarize or overview,
        overview=overview,
        choices=choices,
        name=name or default,
    )
