"""Issue 13, part A, item 11: budget caps, the estimate before a large build, the cost in the summary,
and a configurable input size limit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import paragraphs
from knowtree import errors
from knowtree.cli.app import app
from knowtree.core import KnowTree
from knowtree.llm.base import Message
from knowtree.llm.client import ClientOptions, LLMClient
from knowtree.testing.models import KeywordModel, ScriptedModel


@pytest.fixture
def cli() -> CliRunner:
    return CliRunner()


@pytest.fixture
def doc() -> str:
    Path("doc.md").write_text(paragraphs(12), encoding="utf-8")
    return "doc.md"


BUILD = ("--db", "kb.db", "--tree", "t", "--model", "keyword", "-q", "--chunk-size", "200")


def calls(out: str) -> tuple[int, int]:
    m = re.search(r"(\d+) answered from cache, (\d+) LLM calls", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def test_max_calls_stops_the_build_and_the_rerun_resumes(cli: CliRunner, doc: str) -> None:
    result = cli.invoke(app, ["build", doc, *BUILD, "--max-calls", "5"])
    assert result.exit_code == 1 and "budget reached: 5 model calls made" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    again = cli.invoke(app, ["build", doc, *BUILD])
    assert again.exit_code == 0, again.stderr
    cached, made = calls(again.stdout)
    assert made > 0
    assert cached >= 5  # the five finished calls were kept
    ledger = cli.invoke(app, ["ledger", "--db", "kb.db", "--json"]).stdout
    assert '"status": "failed"' in ledger


def test_budget_settings_from_the_environment(
    cli: CliRunner, doc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KNOWTREE_MAX_TOKENS", "2000")
    result = cli.invoke(app, ["build", doc, *BUILD])
    assert result.exit_code == 1 and "--max-tokens 2,000" in result.stderr


def test_max_calls_per_question(cli: CliRunner, doc: str) -> None:
    assert cli.invoke(app, ["build", doc, *BUILD]).exit_code == 0
    q = ["ask", "t", "How many ships did keeper number 7 log?", "--db", "kb.db", "--model", "keyword", "--mode", "walk"]
    result = cli.invoke(app, [*q, "--max-calls", "1"])
    assert result.exit_code == 1 and "budget reached" in result.stderr
    assert cli.invoke(app, q).exit_code == 0


def test_cached_calls_are_free_and_concurrent_calls_cannot_overshoot() -> None:
    client = LLMClient(KeywordModel(), options=ClientOptions(max_calls=2, concurrency=4))
    msgs = [Message(role="user", content="Summary: a.\n")]
    for _ in range(3):  # the same request: one call, then the cache
        client.complete(_req(msgs), purpose="branch_meta")
    client.complete(_req([Message(role="user", content="Summary: b.\n")]), purpose="branch_meta")
    with pytest.raises(errors.BudgetExceededError) as err:
        client.complete(_req([Message(role="user", content="Summary: c.\n")]), purpose="branch_meta")
    assert err.value.limit == "calls" and client.usage.calls == 2 and client.usage.cached == 2


def test_max_cost_uses_the_model_prices() -> None:
    model = ScriptedModel(['{"summary": "x"}'] * 5)
    model.input_cost_per_mtok = 1_000_000.0  # $1 per token: $10 a call here; the second passes $15
    client = LLMClient(model, options=ClientOptions(max_cost=15.0))
    client.complete(_req([Message(role="user", content="x" * 40)]), purpose="p")
    with pytest.raises(errors.BudgetExceededError, match=r"--max-cost \$15"):
        client.complete(_req([Message(role="user", content="y" * 40)]), purpose="p")


def _req(messages: list[Message]):
    from knowtree.llm.base import Request

    return Request(messages=messages, schema_name="branch_meta")


def test_large_build_asks_first(cli: CliRunner, doc: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KNOWTREE_CONFIRM_CALLS", "3")
    refused = cli.invoke(app, ["build", doc, *BUILD])  # no terminal, no --yes
    assert (
        refused.exit_code == 1
        and "this build will make about" in refused.stderr
        and "--yes" in refused.stderr
    )
    assert "no tree" in cli.invoke(app, ["show", "t", "--db", "kb.db"]).stderr
    told = cli.invoke(app, ["build", doc, *BUILD], input="n\n")
    assert told.exit_code == 1
    assert cli.invoke(app, ["build", doc, *BUILD, "--yes"]).exit_code == 0
    again = cli.invoke(app, ["build", doc, *BUILD])  # unchanged: estimated at 0 calls, not asked
    assert again.exit_code == 0, again.stderr


def test_estimate_is_asked_through_the_python_api(tmp_path: Path, doc: str) -> None:
    seen = []
    with KnowTree(tmp_path / "kb.db", model=KeywordModel(), chunk_size=200, confirm_calls=3) as kt:
        with pytest.raises(Exception, match="build not started"):
            kt.build(doc, tree="t", confirm=lambda e: seen.append(e) or False)
        assert seen[0].calls >= 12 and not kt.trees()
        report = kt.build(doc, tree="t", confirm=lambda e: True)
    assert report.leaves <= seen[0].calls


def test_cost_in_the_summary(cli: CliRunner, doc: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = cli.invoke(app, ["build", doc, *BUILD]).stdout
    assert "$" not in out  # no prices set: no made-up cost
    with KnowTree("kb2.db", model=_Priced(), chunk_size=200) as kt:
        line = kt.build(doc, tree="t").line()
    assert re.search(r"tokens \(\$\d+\.\d{4}\)", line)


class _Priced(KeywordModel):
    def __init__(self) -> None:
        super().__init__()
        self.input_cost_per_mtok = 0.15
        self.output_cost_per_mtok = 0.6


def test_input_size_limit_is_configurable(cli: CliRunner, doc: str) -> None:
    result = cli.invoke(app, ["build", doc, *BUILD, "--max-input-mb", "0.001"])
    assert result.exit_code == 1 and "doc.md: file is too large" in result.stderr
    assert cli.invoke(app, ["build", doc, *BUILD, "--max-input-mb", "1"]).exit_code == 0


def test_pdf_titles_only_build_is_estimated_by_its_real_calls(tmp_path: Path) -> None:
    from knowtree.config import Settings
    from knowtree.construct.estimate import estimate_sources
    from knowtree.ingest.sources import load_sources
    from pdf_maker import filler, make_pdf

    pages = [[f"Chapter {i} Topic {i}", *filler(f"topic{i}", 30)] for i in range(60)]
    pdf = make_pdf(tmp_path / "big.pdf", pages)
    sources = load_sources([str(pdf)])
    settings = Settings.load({}, env={})
    titles_only = estimate_sources(sources, settings, summaries="auto")  # PDFs: no leaf summaries
    eager = estimate_sources(sources, settings, summaries="eager")
    assert titles_only.calls <= 1 + 1 + 2  # description + structure search (1 + a call per 40 pages)
    assert eager.calls > 5 * titles_only.calls


def test_confirm_asks_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from knowtree.cli.admin import confirm_build
    from knowtree.construct.estimate import BuildEstimate

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    asked: list[str] = []
    monkeypatch.setattr("sys.stdin", Tty())
    monkeypatch.setattr("typer.confirm", lambda text, **kw: asked.append(text) or False)
    estimate = BuildEstimate(documents=1, characters=10**6, calls=1200, tokens=10**6, cost_usd=None)
    assert confirm_build(False)(estimate) is False
    assert "about 1,200 model calls" in asked[0]
    assert confirm_build(True)(estimate) is True and len(asked) == 1


# -- issue 35, item 12: the estimate knows --summaries none; --max-cost without prices ------------------
def test_summaries_none_is_estimated_at_no_model_call() -> None:
    from knowtree.config import Settings
    from knowtree.construct.estimate import estimate_build

    files = [(f"notes/n{i}.md", f"sha{i}", 200) for i in range(1000)]
    assert estimate_build(files, Settings.load({}, env={})).calls > 1000  # summaries: one call a leaf
    none = estimate_build(files, Settings.load({"summaries": "none"}, env={}))
    assert none.calls == 0 and none.documents == 1000 and "about 0 model calls" in none.line()


def test_build_of_many_files_with_summaries_none_is_not_refused(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KNOWTREE_CONFIRM_CALLS", "100")  # 300 files: ~340 calls when summarized
    Path("many").mkdir()
    for i in range(300):
        Path(f"many/n{i:03}.md").write_text(f"Note {i} about topic {i}.\n", encoding="utf-8")
    common = ["--db", "kb.db", "--model", "keyword", "-q"]
    built = cli.invoke(app, ["build", "many", "--tree", "t", "--summaries", "none", *common])  # no --yes
    assert built.exit_code == 0, built.stderr
    assert re.search(r"\b0 LLM calls", built.stdout), built.stdout
    summarized = cli.invoke(app, ["build", "many", "--tree", "u", "--summaries", "eager", *common])
    assert summarized.exit_code == 1 and "--yes" in summarized.stderr  # the estimate still asks


def test_max_cost_without_prices_is_refused_before_anything_runs(
    cli: CliRunner, doc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = cli.invoke(app, ["build", doc, *BUILD, "--max-cost", "0.5"])
    assert refused.exit_code == 1
    assert "--max-cost $0.5 cannot be enforced: model 'keyword' has no prices" in refused.stderr
    assert "KNOWTREE_INPUT_COST_PER_MTOK" in refused.stderr and "--max-tokens" in refused.stderr
    assert "no tree" in cli.invoke(app, ["show", "t", "--db", "kb.db"]).stderr
    assert "build" not in cli.invoke(app, ["ledger", "--db", "kb.db"]).stdout  # no run was recorded
    monkeypatch.setenv("KNOWTREE_INPUT_COST_PER_MTOK", "0.15")  # prices known: the cap is kept
    assert cli.invoke(app, ["build", doc, *BUILD, "--max-cost", "0.5"]).exit_code == 0
    asked = cli.invoke(app, ["ask", "t", "what is it about?", "--db", "kb.db", "--model", "keyword", "--max-cost", "1"])
    assert asked.exit_code == 0, asked.stderr
    monkeypatch.delenv("KNOWTREE_INPUT_COST_PER_MTOK")
    asked = cli.invoke(app, ["ask", "t", "what is it about?", "--db", "kb.db", "--model", "keyword", "--max-cost", "1"])
    assert asked.exit_code == 1 and "cannot be enforced" in asked.stderr


def test_max_cost_holds_for_a_free_model_and_is_refused_by_the_client_without_prices() -> None:
    free = KeywordModel()
    free.free = True  # as the embedded model is: nothing is billed
    LLMClient(free, options=ClientOptions(max_cost=1.0))
    with pytest.raises(errors.ConfigError, match="cannot be enforced"):
        LLMClient(KeywordModel(), options=ClientOptions(max_cost=1.0))


def test_run_wide_caps_count_the_calls_other_processes_recorded_under_the_run(tmp_path: Path) -> None:
    """A Ray build's tasks each have a client of their own on the shared store, under the driver's run:
    with `run_wide` the cap holds for the run (what the ledger has), not for each task alone."""
    from knowtree.store import SQLiteStore

    store = SQLiteStore(tmp_path / "kb.db")
    try:
        run = store.start_run("build", "t")
        first = LLMClient(KeywordModel(), store, ClientOptions(max_calls=3, run_wide=True), run_id=run)
        for word in ("a", "b"):
            first.complete(_req([Message(role="user", content=f"Summary: {word}.\n")]), purpose="branch_meta")
        second = LLMClient(KeywordModel(), store, ClientOptions(max_calls=3, run_wide=True), run_id=run)
        second.complete(_req([Message(role="user", content="Summary: c.\n")]), purpose="branch_meta")
        with pytest.raises(errors.BudgetExceededError) as err:
            second.complete(_req([Message(role="user", content="Summary: d.\n")]), purpose="branch_meta")
        assert err.value.limit == "calls" and store.run_usage(run).calls == 3
        # a cache hit is still free, and a client of its own (no run_wide) counts only itself
        second.complete(_req([Message(role="user", content="Summary: a.\n")]), purpose="branch_meta")
        alone = LLMClient(KeywordModel(), store, ClientOptions(max_calls=3), run_id=run)
        alone.complete(_req([Message(role="user", content="Summary: e.\n")]), purpose="branch_meta")
    finally:
        store.close()
