"""The `knowtree` command, through typer's CliRunner and once through the real entry point.

Every command that may call a model gets `--model keyword`: the embedded model never runs here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from conftest import paragraphs, write_corpus
from knowtree.cli.app import app

SIX_LABELS = ("Summary:", "Content types:", "Critical actions:", "Decisions:", "Noteworthy events:", "About:")
KNOWTREE_BIN = Path(sys.executable).with_name("knowtree")


@pytest.fixture
def cli() -> CliRunner:
    return CliRunner()


def ok(cli: CliRunner, *args: str) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result.stdout


def llm_calls(output: str) -> int:
    counts = re.findall(r"(\d+) LLM calls", output)
    assert counts, output
    return int(counts[-1])


def show_json(cli: CliRunner, tree: str = "t") -> dict[str, object]:
    return json.loads(ok(cli, "show", tree, "--db", "kb.db", "--json"))


@pytest.fixture
def built(cli: CliRunner, tmp_path: Path) -> list[str]:
    """The corpus in ./docs (cwd is tmp_path) built into ./kb.db as tree 't'."""
    write_corpus(tmp_path / "docs")
    ok(cli, "build", "docs", "--db", "kb.db", "--tree", "t", "--model", "keyword", "--quiet")
    return ["docs/budget.md", "docs/launch.md", "docs/database.md"]


# -- the real entry point --------------------------------------------------------------------------


def entry(*args: str) -> subprocess.CompletedProcess[str]:
    assert KNOWTREE_BIN.exists(), KNOWTREE_BIN
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KNOWTREE_", "OPENAI_", "ANTHROPIC_"))}
    return subprocess.run(
        [str(KNOWTREE_BIN), *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def test_entry_point_build_twice_costs_no_calls_the_second_time(tmp_path: Path) -> None:
    write_corpus(tmp_path / "docs")
    first = entry("build", "docs", "--db", "kb.db", "--model", "keyword")
    assert first.returncode == 0, first.stderr
    assert llm_calls(first.stdout) == 4
    second = entry("build", "docs", "--db", "kb.db", "--model", "keyword")
    assert second.returncode == 0, second.stderr
    assert llm_calls(second.stdout) == 0
    assert "4 answered from cache" in second.stdout
    asked = entry(
        "ask", "default", "Who approved the marketing budget?", "--db", "kb.db", "--model", "keyword"
    )
    assert asked.returncode == 0, asked.stderr
    assert "Alice Chen" in asked.stdout and "docs/budget.md:" in asked.stdout


def test_entry_point_bad_input_is_one_line_without_traceback(tmp_path: Path) -> None:
    (tmp_path / "blob.md").write_bytes(bytes(range(256)) * 8)
    result = entry("build", "blob.md", "--db", "kb.db", "--model", "keyword")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "blob.md" in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_entry_point_bad_overlap_is_one_line_without_traceback(tmp_path: Path) -> None:
    write_corpus(tmp_path / "docs")
    result = entry(
        "build", "docs", "--db", "kb.db", "--model", "keyword", "--chunk-size", "200", "--overlap", "150"
    )
    assert "Traceback" not in result.stderr
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "overlap" in lines[0]


# -- build, ask, show ------------------------------------------------------------------------------


def test_build_reports_calls_and_cache(cli: CliRunner, built: list[str]) -> None:
    out = ok(cli, "build", "docs", "--db", "kb.db", "--tree", "t", "--model", "keyword", "--quiet")
    assert llm_calls(out) == 0
    report = json.loads(
        ok(cli, "build", "docs", "--db", "kb.db", "--tree", "t", "--model", "keyword", "-q", "--json")
    )
    assert report["tree"] == "t" and report["documents"] == 3 and report["leaves"] == 3
    assert report["usage"]["calls"] == 0 and report["usage"]["cached"] == 4


def test_build_progress_goes_to_stderr(cli: CliRunner, tmp_path: Path) -> None:
    write_corpus(tmp_path / "docs")
    result = cli.invoke(app, ["build", "docs", "--db", "kb.db", "--model", "keyword"])
    assert result.exit_code == 0
    assert "LLM calls" in result.stdout and "[" not in result.stdout.splitlines()[0][:1]
    assert re.search(r"\[\d+/\d+\]", result.stderr)  # plain progress lines when not on a terminal


def test_ask_json(cli: CliRunner, built: list[str]) -> None:
    out = ok(
        cli, "ask", "t", "Who approved the marketing budget?", "--db", "kb.db", "--model", "keyword", "--json"
    )
    answer = json.loads(out)
    assert {"answer", "status", "citations", "trace", "usage", "parts"} <= set(answer)
    assert answer["status"] == "complete" and "Alice Chen" in answer["answer"]
    (citation,) = answer["citations"]
    assert citation["file"] == "docs/budget.md" and citation["line_start"] == 4  # the line that says it
    # a chunk tree's default: the index finds the evidence without a model, one call answers
    assert answer["trace"][0]["outcome"].startswith("retrieve:") and answer["usage"]["calls"] == 1
    assert [s["action"] for s in answer["trace"]][-1] == "read"


def test_ask_text_and_trace(cli: CliRunner, built: list[str]) -> None:
    q = "Who approved the marketing budget and when did the launch happen?"
    walk = ("--db", "kb.db", "--model", "keyword", "--mode", "walk")
    plain = ok(cli, "ask", "t", q, *walk)
    # each part cites its quote's own line, not the whole chunk (lines 1-5)
    assert "status: complete" in plain and "docs/budget.md:4-4" in plain and "docs/launch.md:4-4" in plain
    assert "trace:" not in plain
    traced = ok(cli, "ask", "t", q, *walk, "--trace")
    assert "trace:" in traced
    for action in ("decompose", "choose", "read", "combine"):
        assert re.search(rf"^\s+\d+\. {action}", traced, re.M), action
    assert "→ option" in traced


def test_ask_with_no_answer(cli: CliRunner, built: list[str]) -> None:
    out = ok(
        cli, "ask", "t", "What is the airspeed of an unladen swallow?", "--db", "kb.db", "--model", "keyword"
    )
    assert "NO ANSWER" in out and "citations:" not in out


def test_show_prints_all_six_fields_for_root_branches_and_leaves(cli: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "log.md").write_text(paragraphs(12))
    ok(
        cli,
        "build",
        "log.md",
        "--db",
        "kb.db",
        "--tree",
        "t",
        "--model",
        "keyword",
        "--chunk-size",
        "200",
        "-q",
    )
    out = ok(cli, "show", "t", "--db", "kb.db")
    assert out.startswith("tree 't': 1 document(s)") and "12 leaves" in out
    lines = out.splitlines()
    kinds_seen: dict[str, int] = {}
    for i, line in enumerate(lines):
        m = re.match(r"^\s*\[(root|branch|leaf)\] ([0-9a-f]+)", line)
        if not m:
            continue
        kinds_seen[m.group(1)] = kinds_seen.get(m.group(1), 0) + 1
        labels = [lines[i + 1 + k].strip().split(":")[0] + ":" for k in range(6)]
        assert tuple(labels) == SIX_LABELS, (line, labels)
    assert kinds_seen == {"root": 1, "branch": 2, "leaf": 12}
    shallow = ok(cli, "show", "t", "--db", "kb.db", "--depth", "1")
    assert "[branch]" in shallow and "[leaf]" not in shallow


def test_show_node_by_id_prefix(cli: CliRunner, built: list[str]) -> None:
    data = show_json(cli)
    leaf = next(n for n in data["nodes"] if n["kind"] == "leaf" and "budget" in n["spans"][0]["file"])
    ids = [n["id"] for n in data["nodes"]]
    prefix = next(leaf["id"][:k] for k in range(4, 17) if sum(i.startswith(leaf["id"][:k]) for i in ids) == 1)
    out = ok(cli, "show", "t", "--db", "kb.db", "--node", prefix)
    assert f"[leaf] {leaf['id']}" in out
    assert "Alice Chen approved the marketing budget" in out  # the full text of a leaf
    for label in SIX_LABELS:
        assert label in out
    as_json = json.loads(ok(cli, "show", "t", "--db", "kb.db", "--node", prefix, "--json"))
    assert as_json["id"] == leaf["id"]
    missing = cli.invoke(app, ["show", "t", "--db", "kb.db", "--node", "zzzz"])
    assert missing.exit_code == 1 and missing.stderr.startswith("error:")


def test_trees_ledger_rm(cli: CliRunner, built: list[str]) -> None:
    ok(cli, "ask", "t", "Who approved the marketing budget?", "--db", "kb.db", "--model", "keyword")
    trees = ok(cli, "trees", "--db", "kb.db")
    assert trees.startswith("t\t3 doc(s)\t4 nodes\t3 leaves\tdepth 1\tkeyword")
    infos = json.loads(ok(cli, "trees", "--db", "kb.db", "--json"))
    assert [i["name"] for i in infos] == ["t"]
    ledger = ok(cli, "ledger", "--db", "kb.db")
    assert re.search(r"build t .*ok .*4 LLM calls, 0 cached", ledger)
    assert re.search(r"ask +t .*complete .*LLM calls", ledger)
    runs = json.loads(ok(cli, "ledger", "--db", "kb.db", "--json"))
    assert [r["kind"] for r in runs] == ["ask", "build"]
    assert runs[1]["usage"]["calls"] == 4
    assert ok(cli, "rm", "t", "--db", "kb.db").strip() == "deleted tree 't'"
    assert "no trees yet" in ok(cli, "trees", "--db", "kb.db")
    again = cli.invoke(app, ["rm", "t", "--db", "kb.db"])
    assert again.exit_code == 1 and again.stderr.startswith("error: no tree named 't'")


def test_models(cli: CliRunner) -> None:
    out = ok(cli, "models")
    for form in ("local", "openai:MODEL", "ollama:MODEL", "anthropic:MODEL", "keyword"):
        assert re.search(rf"^{re.escape(form)}\s", out, re.M), form
    assert "embedded model:" in out and "openai adapter:" in out


def test_help(cli: CliRunner) -> None:
    out = ok(cli, "--help")
    for command in ("build", "ask", "show", "trees", "rm", "ledger", "models"):
        assert command in out


# -- failures: one line, no traceback, nothing changed ---------------------------------------------


def one_error_line(result: Result, *needles: str) -> str:
    assert result.exit_code not in (0, None), result.stdout
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:")
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


@pytest.mark.parametrize("kind", ["missing", "empty", "binary", "binary-in-directory"])
def test_bad_input_fails_cleanly_and_keeps_the_tree(
    cli: CliRunner, built: list[str], tmp_path: Path, kind: str
) -> None:
    before = show_json(cli)
    if kind == "missing":
        target, name = "docs/nope.md", "nope.md"
    elif kind == "empty":
        (tmp_path / "empty.md").write_text("")
        target, name = "empty.md", "empty.md"
    elif kind == "binary":
        (tmp_path / "random.txt").write_bytes(os.urandom(3000))
        target, name = "random.txt", "random.txt"
    else:
        (tmp_path / "docs" / "zzz.md").write_bytes(b"\x00\x01\x02\xff" * 500)
        target, name = "docs", "zzz.md"
    result = cli.invoke(app, ["build", target, "--db", "kb.db", "--tree", "t", "--model", "keyword"])
    one_error_line(result, name)
    assert result.exit_code == 1
    assert show_json(cli) == before


def test_unknown_model_is_one_line(cli: CliRunner, built: list[str]) -> None:
    before = show_json(cli)
    result = cli.invoke(app, ["build", "docs", "--db", "kb.db", "--tree", "t", "--model", "gpt-9000"])
    line = one_error_line(result, "gpt-9000")
    assert "keyword" in line  # the accepted forms are listed
    assert show_json(cli) == before
    asked = cli.invoke(app, ["ask", "t", "Who?", "--db", "kb.db", "--model", "gpt-9000"])
    one_error_line(asked, "gpt-9000")


def test_failed_model_resolution_leaves_no_running_run(cli: CliRunner, built: list[str]) -> None:
    cli.invoke(app, ["build", "docs", "--db", "kb.db", "--tree", "t", "--model", "gpt-9000"])
    cli.invoke(app, ["ask", "t", "Who?", "--db", "kb.db", "--model", "gpt-9000"])
    runs = json.loads(ok(cli, "ledger", "--db", "kb.db", "--json"))
    assert [r["status"] for r in runs if r["status"] == "running"] == []


def test_missing_tree_lists_known_trees(cli: CliRunner, built: list[str]) -> None:
    ok(cli, "build", "docs/budget.md", "--db", "kb.db", "--tree", "other", "--model", "keyword", "-q")
    result = cli.invoke(app, ["ask", "nope", "Who?", "--db", "kb.db", "--model", "keyword"])
    line = one_error_line(result, "'nope'", "other", "t")
    assert "trees: other, t" in line
    shown = cli.invoke(app, ["show", "nope", "--db", "kb.db"])
    one_error_line(shown, "'nope'")


def test_missing_tree_in_a_new_database(cli: CliRunner) -> None:
    result = cli.invoke(app, ["show", "t", "--db", "fresh.db"])
    one_error_line(result, "no knowtree database at fresh.db")
    assert not Path("fresh.db").exists()  # reading never creates a database


@pytest.mark.sqlite_only
def test_corrupt_database_is_one_line(cli: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "bad.db").write_bytes(b"not a database at all\n" * 100)
    result = cli.invoke(app, ["trees", "--db", "bad.db"])
    one_error_line(result, "bad.db")
    assert result.exit_code == 3  # not the user's input, but the store


def test_invalid_setting_is_one_line(cli: CliRunner, built: list[str]) -> None:
    result = cli.invoke(app, ["build", "docs", "--db", "kb.db", "--model", "keyword", "--chunk-size", "10"])
    one_error_line(result, "chunk_size")


def test_keyword_model_from_the_environment(
    cli: CliRunner, built: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KNOWTREE_MODEL", "keyword")
    monkeypatch.setenv("KNOWTREE_DB", "kb.db")
    out = ok(cli, "ask", "t", "Who approved the marketing budget?")
    assert "Alice Chen" in out


def test_sample_corpus_builds_and_answers(cli: CliRunner, tmp_path: Path) -> None:
    out = ok(cli, "sample", "lh")
    assert out.startswith("wrote 3 files to lh/")
    assert sorted(p.name for p in (tmp_path / "lh").iterdir()) == ["handbook.md", "meetings.md", "tickets.md"]
    report = json.loads(ok(cli, "build", "lh", "--db", "kb.db", "--model", "keyword", "-q", "--json"))
    assert report["documents"] == 3 and report["fallbacks"] == 0 and report["leaves"] >= 3
    shown = ok(cli, "show", "default", "--db", "kb.db")
    assert shown.count("[leaf]") == report["leaves"]
