"""Issue 36, a cold `knowtree ask` on a SQLite file imports what the question needs and no more: no
psycopg (the store's error classes no longer need it), no other command's module (the CLI builds a
command when it runs), no conversation memory's modules (`knowtree.Memory` is imported on first use).
The commands and their help stay the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowtree.core import KnowTree
from knowtree.testing.models import KeywordModel
from test_scale_index import _tickets

#: run the console script's `main` in a fresh interpreter, then name the modules it loaded
_RUN = """
import json, sys
sys.argv = ["knowtree", *json.loads(sys.argv[1])]
from knowtree.cli.app import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""

NOT_FOR_A_QUESTION = [
    "psycopg",
    "knowtree.memory",
    "knowtree.construct.conversation",
    "knowtree.ingest.chat",
    *(
        f"knowtree.cli.{m}"
        for m in ("admin", "chat", "db", "db_copy", "docs", "doctor", "eval", "expert", "kb", "keys", "model")
    ),
    "knowtree.cli.serve",
    "knowtree.cli.worker",
]


def _cli(*args: str) -> tuple[str, dict]:
    done = subprocess.run(
        [sys.executable, "-c", _RUN, json.dumps(args)], capture_output=True, text=True, check=True
    )
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.sqlite_only  # a question on an SQLite file (the CLI in a new process reads the file)
def test_a_cold_question_imports_no_other_command_and_no_psycopg(tmp_path: Path) -> None:
    db = tmp_path / "kb.db"
    with KnowTree(db, model=KeywordModel(), summaries="none", structure="headings") as kt:
        kt.build(_tickets(tmp_path / "docs", 30), tree="t")
    out, seen = _cli(
        "ask", "t", "what did dmitri file as code7?", "--db", str(db), "--model", "keyword",
        "--mode", "retrieve", "--no-answer",
    )  # fmt: skip
    assert seen["code"] == 0 and "code7" in out
    assert [m for m in NOT_FOR_A_QUESTION if m in seen["modules"]] == []


def test_every_command_is_listed_and_runs_from_its_module(tmp_path: Path) -> None:
    from knowtree.cli.app import COMMANDS, app

    out, seen = _cli("--help")
    assert seen["code"] == 0
    assert all(f" {name} " in out for name in COMMANDS)  # the listing names every command
    result = CliRunner().invoke(app, ["db", "--help"])  # a sub-app, with the command added to it
    assert result.exit_code == 0 and all(c in result.output for c in ("start", "stop", "copy"))
    result = CliRunner().invoke(app, ["nosuch"])
    assert result.exit_code == 2 and "No such command" in result.output
