"""Score-guided navigation (`--mode nav`): the judge's grades combined with the tree's prior."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import CORPUS, write_corpus
from knowtree.answer.nav import NavOptions, Unit, lift, navigate, parse_options, units_of, within_budget
from knowtree.cli.app import app
from knowtree.core import KnowTree
from knowtree.errors import UserError
from knowtree.llm.base import Request
from knowtree.retrieve.treeindex import IndexRow, TreeIndex
from knowtree.retrieve.treescore import TreeShape
from knowtree.retrieve.treesearch import DOCUMENT_PARAMS, Ranking, rank_tree, shape_of
from knowtree.testing.models import FunctionModel, KeywordModel

QUESTION = "Who approved the marketing budget?"


def _no_model(request: Request) -> Any:
    raise AssertionError(f"no model call expected, got {request.schema_name}")


def _numbers(request: Request) -> list[str]:
    return re.findall(r"^\[(\d+)\] ", request.messages[-1].content, flags=re.M)


def _setup(tmp_path: Path) -> tuple[KnowTree, TreeIndex]:
    write_corpus(tmp_path / "docs")
    kt = KnowTree(tmp_path / "kb.db", model=FunctionModel(_no_model, id="none"), summaries="none")
    kt.build([str(p) for p in sorted((tmp_path / "docs").iterdir())], tree="t")
    return kt, TreeIndex(kt.store, "t")


def _ranked(index: TreeIndex) -> tuple[TreeShape, Ranking, dict[str, IndexRow], list[Unit]]:
    """The tree's shape, its LLM-free ranking for QUESTION, the index rows by id and the ranked units."""
    shape = shape_of(index)
    ranking = rank_tree(index, QUESTION, embedder=None, params=DOCUMENT_PARAMS, shape=shape)
    rows = {r.id: r for r in index.rows}
    return shape, ranking, rows, units_of(ranking, rows)


def test_judge_grades_reorder_the_prior(tmp_path: Path) -> None:
    kt, index = _setup(tmp_path)
    with kt:
        shape, ranking, rows, units = _ranked(index)
        assert len(units) >= 3
        last = units[2]  # the third unit by prior: the judge calls it the only answer

        def grade(request: Request) -> Any:
            assert request.schema_name == "nav_judge"
            return {n: ("yes" if n == "3" else "no") for n in _numbers(request)}

        model = FunctionModel(grade)
        client = KnowTree(tmp_path / "other.db", model=model).client()
        nav = navigate(
            index, ranking, QUESTION, client, shape, NavOptions(candidates=3, rounds=1, weight=2.0)
        )
        same = navigate(
            index, ranking, QUESTION, client, shape, NavOptions(candidates=3, rounds=1, weight=0.0)
        )
    assert len(model.requests) == 1  # the second navigation was answered by the cache
    assert same.ranking.pieces == ranking.pieces  # weight 0: the prior alone
    assert rows[nav.ranking.pieces[0]].node == last.node != rows[ranking.pieces[0]].node
    assert nav.grades[last.node] == 1.0 and nav.grades[units[0].node] == 0.0
    judge_step = nav.steps[0]
    assert judge_step.options == [u.node for u in units[:3]] and judge_step.error is None
    assert "[3] yes" in judge_step.reason
    # the units the judge did not see keep their prior order behind the lifted one
    unjudged = [p for p in nav.ranking.pieces if rows[p].node not in nav.grades]
    assert unjudged == [p for p in ranking.pieces if rows[p].node not in nav.grades]


def test_a_malformed_reply_falls_back_to_the_prior_and_is_traced(tmp_path: Path) -> None:
    kt, index = _setup(tmp_path)
    with kt:
        shape = shape_of(index)
        ranking = rank_tree(index, QUESTION, embedder=None, params=DOCUMENT_PARAMS, shape=shape)
        model = FunctionModel(lambda r: "I think the second one, maybe")
        client = KnowTree(tmp_path / "other.db", model=model).client()
        nav = navigate(index, ranking, QUESTION, client, shape, NavOptions(candidates=2, rounds=2))
    assert len(model.requests) == 2  # no repair call: one call per round
    assert nav.fallbacks == 2 and nav.grades == {}
    assert nav.ranking.pieces == ranking.pieces  # the prior's order, not "nothing found"
    assert all(s.error and "malformed judge reply" in s.error for s in nav.steps[:2])
    assert nav.steps[-1].error == "no grade usable: the ranking is the prior's"


def test_round_two_follows_the_branch_of_a_relevant_unit() -> None:
    # root → A (a1, a2), B (b1): a1 was judged relevant, so a2 is judged before b1 despite its prior
    shape = TreeShape(
        parent={"A": "root", "B": "root", "a1": "A", "a2": "A", "b1": "B", "root": None},
        leaves=["a1", "a2", "b1"],
    )
    a1, a2, b1 = Unit("a1", ["a1"], 1.0), Unit("a2", ["a2"], 0.3), Unit("b1", ["b1"], 0.5)
    options = NavOptions()
    pre = lift([a2, b1], [a1], {"a1": 1.0}, shape, options)
    assert pre["a2"] > pre["b1"]
    assert lift([a2, b1], [a1], {"a1": 0.0}, shape, options) == {"a2": 0.3, "b1": 0.5}  # a "no" lifts nothing


def _judge_then_keyword(calls: list[str]) -> FunctionModel:
    keyword = KeywordModel()

    def reply(request: Request) -> Any:
        calls.append(request.schema_name)
        return keyword.reply(request)

    return FunctionModel(reply, id="keyword")


def test_tree_ask_mode_nav_answers_within_four_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("knowtree.retrieve.treesearch.resolve_embedder", lambda e: None)
    write_corpus(tmp_path / "docs")
    calls: list[str] = []
    with KnowTree(tmp_path / "kb.db", model=_judge_then_keyword(calls), summaries="none") as kt:
        kt.build([str(p) for p in sorted((tmp_path / "docs").iterdir())], tree="t")
        everything = kt.tree("t").ask(QUESTION, mode="nav", budget_tokens=400)
        assert calls == ["search_answer"]  # all three leaves fit: nothing to judge
        calls.clear()
        answer = kt.tree("t").ask(QUESTION, mode="nav", budget_tokens=60)
    assert everything.answer == answer.answer
    # one leaf fits: round 1 judges the two the budget leaves out, round 2 has nothing left
    assert calls == ["nav_judge", "search_answer"]
    assert answer.status == "complete" and "Alice" in (answer.answer or "")
    assert answer.citations and answer.citations[0].file.endswith("budget.md")
    judged = [s for s in answer.trace if s.action == "choose"]
    assert len(judged) == 1 and len(judged[0].options) == 2 and "[1]" in judged[0].reason
    assert any(s.action == "combine" and "prior" in s.outcome for s in answer.trace)


def test_nav_answers_each_part_of_a_question_from_its_own_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("knowtree.retrieve.treesearch.resolve_embedder", lambda e: None)
    write_corpus(tmp_path / "docs")
    calls: list[str] = []
    with KnowTree(tmp_path / "kb.db", model=_judge_then_keyword(calls), summaries="none") as kt:
        kt.build([str(p) for p in sorted((tmp_path / "docs").iterdir())], tree="t")
        q = "Who approved the marketing budget and when did the launch happen?"
        answer = kt.tree("t").ask(q, mode="nav", budget_tokens=800)
    assert calls[0] == "decompose" and calls.count("search_answer") == 2  # one answer call per part
    assert answer.status == "complete" and [p["status"] for p in answer.parts] == ["complete"] * 2
    assert "Alice Chen" in (answer.answer or "") and "September 14" in (answer.answer or "")
    assert sorted(c.file.rsplit("/", 1)[-1] for c in answer.citations) == ["budget.md", "launch.md"]
    # each part its own ranking and evidence
    assert [s.action for s in answer.trace if s.outcome.startswith("nav:")] == ["combine", "read"] * 2
    assert answer.usage.calls == len(calls)  # counted once, not once per part


def test_cli_mode_nav(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("knowtree.retrieve.treesearch.resolve_embedder", lambda e: None)
    write_corpus(tmp_path / "docs")
    cli = CliRunner()
    build = [
        "build",
        "docs",
        "--db",
        "kb.db",
        "--tree",
        "t",
        "--model",
        "keyword",
        "--summaries",
        "none",
        "-q",
    ]
    assert cli.invoke(app, build).exit_code == 0
    q = "Which database did the platform team choose?"
    result = cli.invoke(
        app,
        ["ask", "t", q, "--db", "kb.db", "--model", "keyword", "--mode", "nav", "--budget", "60", "--json"],
    )
    assert result.exit_code == 0, (result.stdout, result.exception)
    got = json.loads(result.stdout)
    assert got["status"] == "complete" and "PostgreSQL" in got["answer"]
    assert 2 <= got["usage"]["calls"] + got["usage"]["cached"] <= 4
    assert [s["action"] for s in got["trace"]][:3] == ["choose", "combine", "read"]


def test_cli_mode_nav_trace_without_a_judge_reports_no_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35 item 12: everything fits the budget, so no judge is called: that is no error."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("knowtree.retrieve.treesearch.resolve_embedder", lambda e: None)
    write_corpus(tmp_path / "docs")
    cli = CliRunner()
    common = ["--db", "kb.db", "--model", "keyword"]
    assert cli.invoke(app, ["build", "docs", "--tree", "t", "--summaries", "none", "-q", *common]).exit_code == 0
    q = "Which database did the platform team choose?"
    ask = ["ask", "t", q, "--mode", "nav", "--budget", "4000", *common]
    shown = cli.invoke(app, [*ask, "--trace"])
    assert shown.exit_code == 0, (shown.stdout, shown.exception)
    assert "ERROR" not in shown.stdout and "no grade usable" not in shown.stdout
    assert "no judge needed" in shown.stdout
    got = json.loads(cli.invoke(app, [*ask, "--json"]).stdout)
    assert [s["action"] for s in got["trace"]][:2] == ["combine", "read"]  # no "choose": no judge call
    assert all(s.get("error") is None for s in got["trace"]) and got["status"] == "complete"


def test_eval_method_nav_records_calls_and_budget_hits(tmp_path: Path) -> None:
    from knowtree_eval.runner import run_eval

    data = tmp_path / "q.jsonl"
    docs = [{"id": n, "text": t} for n, t in CORPUS.items()]
    rows = [
        {"id": "q1", "question": QUESTION, "documents": docs, "corpus": "c", "evidence": ["budget.md"]},
        {"id": "q2", "question": "Where did the launch happen?", "corpus": "c", "evidence": ["launch.md"]},
    ]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    summary = run_eval(
        "jsonl",
        data,
        "tree,nav",
        tmp_path / "out",
        embedder="hash",
        progress=False,
        model_object=KeywordModel(),
        budget=60,  # one leaf of three: the judge grades the two the budget leaves out
    )
    nav = summary["methods"]["nav"]
    assert nav["hit_by_budget"][256] == 1.0
    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    navs = [r for r in records if r["method"] == "nav"]
    assert len(navs) == 2 and all(r["llm_calls"] == 2 and r["round_trips"] == 2 for r in navs)
    assert all(r["prediction"] and r["metrics"]["judge_fallbacks"] == 0 for r in navs)
    judge_only = [r for r in records if r["method"] == "nav-judge"]
    assert all(r["llm_calls"] == 1 and r["prediction"] is None for r in judge_only)


def test_nav_options_from_text() -> None:
    got = parse_options("rounds=1, candidates=8 snippet-chars=240,first=top,soft=off,weight=0.25")
    assert (got.rounds, got.candidates, got.snippet_chars, got.first, got.soft, got.weight) == (
        1,
        8,
        240,
        "top",
        False,
        0.25,
    )
    assert parse_options("") == NavOptions()
    for bad, message in [
        ("beam=3", "expected NAME=VALUE"),
        ("rounds", "expected NAME=VALUE"),
        ("rounds=two", "is not a int"),
        ("rounds=0", "at least 1"),
        ("first=middle", "top or edge"),
        ("soft=maybe", "is not a bool"),
    ]:
        with pytest.raises(UserError, match=message):
            parse_options(bad)


def test_eval_nav_options_change_the_judging_and_key_the_run(tmp_path: Path) -> None:
    from knowtree_eval.runner import run_eval

    data = tmp_path / "q.jsonl"
    docs = [{"id": n, "text": t} for n, t in CORPUS.items()]
    row = {"id": "q1", "question": QUESTION, "documents": docs, "corpus": "c", "evidence": ["budget.md"]}
    data.write_text(json.dumps(row) + "\n", encoding="utf-8")
    shown: list[int] = []

    def judge(request: Request) -> Any:
        assert request.schema_name != "answer"
        numbers = _numbers(request)
        shown.append(len(numbers))
        return {n: "no" for n in numbers}

    run = dict(embedder="hash", progress=False, model_object=FunctionModel(judge, id="j"), budget=60)
    summary = run_eval("jsonl", data, "nav-judge", tmp_path / "o", nav="rounds=1,candidates=1", **run)
    assert shown == [1] and "--nav rounds=1,candidates=1" in summary["command"]
    records = [json.loads(x) for x in (tmp_path / "o" / "results.jsonl").read_text().splitlines()]
    assert [r["llm_calls"] for r in records] == [1]
    with pytest.raises(UserError, match="different evaluation"):  # other options: not the same run
        run_eval("jsonl", data, "nav-judge", tmp_path / "o", nav="rounds=2", **run)


def test_later_rounds_judge_only_what_the_budget_leaves_out(tmp_path: Path) -> None:
    kt, index = _setup(tmp_path)
    with kt:
        shape = shape_of(index)
        ranking = rank_tree(index, QUESTION, embedder=None, params=DOCUMENT_PARAMS, shape=shape)
        model = FunctionModel(lambda r: {n: "no" for n in _numbers(r)})
        client = KnowTree(tmp_path / "other.db", model=model).client()
        options = NavOptions(candidates=1, rounds=2, first="top")
        everything = navigate(index, ranking, QUESTION, client, shape, options, budget_tokens=10_000)
        edge = NavOptions(candidates=1, rounds=2)
        nothing = navigate(index, ranking, QUESTION, client, shape, edge, budget_tokens=10_000)
        small = navigate(index, ranking, QUESTION, client, shape, options, budget_tokens=None)
    assert everything.calls == 1  # every unit is already read within the budget: no second call
    assert nothing.calls == 0 and nothing.ranking.pieces == ranking.pieces  # nothing left to pull in
    assert small.calls == 2
    # a judge saying "no" to everything does not discriminate: the prior's order stands
    assert small.ranking.pieces == ranking.pieces and small.grades and set(small.grades.values()) == {0.0}


def test_the_first_round_judges_the_budgets_edge_by_default(tmp_path: Path) -> None:
    kt, index = _setup(tmp_path)
    with kt:
        shape, ranking, rows, units = _ranked(index)
        budget = max(1, (len(rows[ranking.pieces[0]].text) + 3) // 4)  # the best piece fits, no more
        inside = within_budget(ranking, rows, budget)
        assert inside and len(units) > len(inside) + 1
        model = FunctionModel(lambda r: {n: ("yes" if n == "1" else "no") for n in _numbers(r)})
        client = KnowTree(tmp_path / "other.db", model=model).client()
        edge, top = (
            NavOptions(candidates=2, rounds=1, weight=4.0),
            NavOptions(candidates=2, rounds=1, first="top"),
        )
        nav = navigate(index, ranking, QUESTION, client, shape, edge, budget_tokens=budget)
        got = navigate(index, ranking, QUESTION, client, shape, top, budget_tokens=budget)
    outside = [u.node for u in units if u.node not in inside]
    assert nav.steps[0].options == outside[:2]  # the best units the budget leaves out
    assert got.steps[0].options == [u.node for u in units[:2]]
    # the judge's "yes" to the best unit outside the budget puts it first
    assert rows[nav.ranking.pieces[0]].node == outside[0] and nav.grades[outside[0]] == 1.0


def test_mode_nav_on_a_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("knowtree.retrieve.treesearch.resolve_embedder", lambda e: None)
    calls: list[str] = []
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        mem = kt.memory("chat")
        stamp = "10:00 am on 1 May, 2023"
        notes = [f"Note {i} about the garden plans." for i in range(12)] + ["My sister Beth moved to Lisbon."]
        mem.add([{"role": "user", "name": "Ann", "content": c, "timestamp": stamp} for c in notes])
    with KnowTree(tmp_path / "kb.db", model=_judge_then_keyword(calls)) as kt:  # the question's calls only
        answer = kt.tree("chat").ask("Where did Beth move?", mode="nav", budget_tokens=40)
    # the judge, then the memory answer step (message numbers), not the document answer step
    assert calls == ["nav_judge", "memory_answer"]
    assert answer.status == "complete" and "Lisbon" in (answer.answer or "")
    assert answer.citations and answer.citations[0].line_start == 13  # message 13
    assert answer.trace[0].action == "choose" and any(s.action == "combine" for s in answer.trace)
    assert any(s.action == "read" and s.outcome.startswith("nav: ") for s in answer.trace)
    assert answer.usage.calls == 2  # the judge's call counted beside the answer's


def test_no_grade_keeps_the_rankings_order_even_where_it_is_not_the_score_order() -> None:
    from knowtree.answer.nav import combine
    from knowtree.retrieve.treesearch import Ranking

    # a second piece of leaf a was ranked after b (repeat decay) although its raw score is higher
    ranking = Ranking(["a:0", "b:0", "a:1"], {"a:0": 1.0, "b:0": 0.6, "a:1": 0.9})
    units = [Unit("a", ["a:0", "a:1"], 1.0), Unit("b", ["b:0"], 0.6)]
    assert combine(ranking, units, {}, 0.5).pieces == ranking.pieces
    lifted = combine(ranking, units, {"b": 0.5, "a": -0.5}, 0.5)
    assert lifted.pieces[0] == "b:0"
