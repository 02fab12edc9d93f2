"""The CLI as a leaf (issue 9): shared options and helpers declared once, `app.py` imported by no
other module, no library module importing `knowtree.cli`; library errors name Python calls, never
commands, and the CLI prints the command to run in their place."""

from __future__ import annotations

import ast
import os
import re
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import knowtree
from knowtree.cli.app import app
from knowtree.cli.common import HINTS, command_hints
from knowtree.errors import KnowtreeError, NotFoundError, UserError

SRC = Path(knowtree.__file__).parent
#: "knowtree COMMAND" or "`COMMAND" for every command of the CLI
CLI_COMMAND = re.compile(
    r"(knowtree |`)(build|enrich|ask|show|trees|rm|ledger|sample|models|eval|export|import|serve|mcp|check|chat"
    r"|expert|keys|kb)\b"
)


def imports(path: Path) -> list[tuple[str, bool]]:
    """(module, at top level) for every import in a file, deferred ones included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, id(node) in top))
            found += [(f"{node.module}.{alias.name}", id(node) in top) for alias in node.names]
    return found


# -- the layout ----------------------------------------------------------------------------------


def test_no_library_module_imports_the_cli() -> None:
    for path in SRC.rglob("*.py"):
        if path.relative_to(SRC).parts[0] == "cli":
            continue
        for module, _ in imports(path):
            assert module != "knowtree.cli" and not module.startswith("knowtree.cli."), (path, module)


def test_only_the_entry_point_imports_app_and_eval_is_imported_lazily() -> None:
    for path in (SRC / "cli").glob("*.py"):
        for module, top_level in imports(path):
            assert not module.startswith("knowtree.cli.app"), (path.name, module)
            if module.startswith("knowtree_eval"):  # the `eval` extra: only when the command runs
                assert path.name == "eval.py" and not top_level, (path.name, module)
    for path in SRC.rglob("*.py"):
        if path.relative_to(SRC).parts[0] != "cli":
            assert not any(m.startswith("knowtree_eval") for m, _ in imports(path)), path


def test_shared_options_are_declared_once() -> None:
    declarations = {
        path.name: path.read_text(encoding="utf-8").count('typer.Option("--db", help="SQLite file or postgresql:// URL')
        for path in (SRC / "cli").glob("*.py")
    }
    assert {name for name, n in declarations.items() if n} == {"options.py"}


# -- library errors name no command; the CLI adds it -------------------------------------------------


def library_messages() -> list[str]:
    """The library's messages that used to name a command, raised or returned through Python."""
    from knowtree.construct.kb.cluster import MAX_ISSUES, agglomerate
    from knowtree.store import SQLiteStore
    from knowtree.store.guard import describe_sqlite_error, preflight
    from knowtree.store.kb import KBRecord, create_kb
    from knowtree.store.runs import busy_error

    messages = []
    with pytest.raises(NotFoundError) as missing_db:
        knowtree.KnowTree("missing.db", create=False)
    messages.append(str(missing_db.value))
    with knowtree.open("kb.db") as kt:
        with pytest.raises(NotFoundError) as no_tree:
            kt.tree("nope")
        messages.append(str(no_tree.value))
    store = SQLiteStore("kb.db")
    record = KBRecord(name="hp", domain="d", attributes={}, rules=[], settings={}, model="keyword")
    create_kb(store, record)
    with pytest.raises(UserError) as kb_exists:
        create_kb(store, record)
    messages.append(str(kb_exists.value))
    messages.append(str(busy_error("kb.db", sqlite3.OperationalError("database is locked"), 5)))
    store.close()
    messages.append(describe_sqlite_error(sqlite3.DatabaseError("database disk image is malformed")))
    with pytest.raises(UserError) as too_many:
        agglomerate(SimpleNamespace(shape=(MAX_ISSUES + 1, MAX_ISSUES + 1)), 0.5)  # type: ignore[arg-type]
    messages.append(str(too_many.value))
    truncate("kb.db")
    with pytest.raises(KnowtreeError) as damaged:
        preflight("kb.db")
    messages.append(str(damaged.value))
    return messages


def truncate(path: str) -> None:
    """Cut a database after its first page (the header still counts them all)."""
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    assert os.path.getsize(path) > 4096
    os.truncate(path, 4096)


def test_library_errors_name_python_calls_not_commands() -> None:
    messages = library_messages()
    for message in messages:
        assert not CLI_COMMAND.search(message), message
    assert "KnowTree.build" in messages[0] and "KB.add" in messages[2] and "replace=True" in messages[2]
    assert "full_check('kb.db')" in messages[-1]
    # every hint the CLI adds has a library message to go in: the two stay in step
    for pattern, _ in HINTS:
        assert any(re.search(pattern, m) for m in messages), pattern
    assert [CLI_COMMAND.search(command_hints(m)).group(0) for m in messages] == [
        "knowtree build",
        "knowtree build",
        "knowtree kb",
        "knowtree ledger",
        "knowtree check",
        "`kb",
        "knowtree check",
    ]
    assert command_hints(messages[2]).endswith(
        "add to it with `knowtree kb add`, or rebuild it with --replace"
    )
    assert command_hints(messages[-1]).endswith("run `knowtree check --db kb.db`")


def one_error_line(result, *needles: str) -> str:
    assert result.exit_code not in (0, None), result.stdout
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_the_cli_still_names_the_command_to_run() -> None:
    cli = CliRunner()
    one_error_line(
        cli.invoke(app, ["trees", "--db", "missing.db"]),
        "no knowtree database at missing.db: build a tree first (knowtree build PATH)",
    )
    knowtree.open("kb.db").close()
    one_error_line(
        cli.invoke(app, ["show", "nope", "--db", "kb.db"]),
        "(trees: none yet: run `knowtree build`)",
    )
    truncate("kb.db")
    line = one_error_line(cli.invoke(app, ["trees", "--db", "kb.db"]), "damaged")
    assert line.endswith("nothing was written to it: run `knowtree check --db kb.db`")


def test_kb_commands_print_database_errors_in_one_line_like_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`knowtree kb ...` shared `run()` with the other commands: an SQLite error past the checks
    made on open is one `error:` line and exit 3, not a traceback (the kb group had its own guard)."""
    from knowtree.kb import KB

    def malformed(self: KB) -> dict:
        raise sqlite3.DatabaseError("database disk image is malformed")

    knowtree.open("kb.db").close()
    monkeypatch.setattr(KB, "show", malformed)
    result = CliRunner().invoke(app, ["kb", "show", "hp", "--db", "kb.db"])
    line = one_error_line(result, "the database is damaged", "run `knowtree check`")
    assert result.exit_code == 3, line
