"""What every command module shares: opening the database, running a command body, printing.

`run(fn)` turns the errors a user can fix into one `error:` line and an exit code (no traceback
unless KNOWTREE_DEBUG=1). Library messages name Python calls, never commands; `command_hints`
puts the command to run in their place, so the CLI still says e.g. "run `knowtree check --db kb.db`".
"""

from __future__ import annotations

import ast
import json
import os
import re
from typing import TYPE_CHECKING, Any

import typer

from knowtree.errors import KnowtreeError, UserError

if TYPE_CHECKING:
    from knowtree.core import KnowTree

RESUME = "finished model calls are cached, run the same command again to resume"

_QUOTED = r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"  # a Python string literal, as repr() writes it

#: (pattern in a library message, what the CLI says there instead), applied in order
HINTS: list[tuple[str, Any]] = [
    (r"build a tree first \(KnowTree\.build\)", "build a tree first (knowtree build PATH)"),
    (r"none yet: build one with KnowTree\.build", "none yet: run `knowtree build`"),
    (
        r"check it with knowtree\.store\.guard\.full_check\(" + _QUOTED + r"\)",
        lambda m: f"run `knowtree check --db {ast.literal_eval(m[1])}`",
    ),
    (r"check it with knowtree\.store\.guard\.full_check", "run `knowtree check`"),
    (r"\(see the ledger of runs for running builds\)", "(see `knowtree ledger` for running builds)"),
    (
        r"add to it with KB\.add, or rebuild it with replace=True",
        "add to it with `knowtree kb add`, or rebuild it with --replace",
    ),
    (r"add the rest with KB\.add", "add the rest with `kb add`"),
]


def command_hints(message: str) -> str:
    """A library error's message as the CLI prints it: the commands to run where it names calls."""
    for pattern, replacement in HINTS:
        message = re.sub(pattern, replacement, message)
    return message


def err(message: str, code: int = 1) -> typer.Exit:
    """Print `error: MESSAGE` on stderr; returns the exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def open_kt(**overrides: Any) -> KnowTree:
    """A `KnowTree` with the command's settings (imported lazily: `knowtree --help` stays fast)."""
    from knowtree.core import KnowTree

    return KnowTree(**overrides)


#: the cyclic garbage collector's thresholds for a command that builds or imports (`run(…, bulk=True)`;
#: every command starts with `app.GC_THRESHOLDS`). Such a command holds millions of objects that
#: live until it ends (nodes, entries, their rows), and at 700 allocations per young collection the
#: collector kept traversing them: a zero-call build of 10^5 E9 leaves on SQLite spent 14.6 s of 77 s
#: in it with Python's default (34 full collections) and 7.2-9.5 s with the start's thresholds;
#: 2.4 s with these, 1.9 s with 50 for the middle generation (one build each, `gc.callbacks`; the
#: middle one's 10 is kept: its objects are the ones most often found to be garbage). A full
#: collection still follows every 100 of the middle generation's.
BULK_GC_THRESHOLDS = (50_000, 10, 100)


def run(fn: Any, *, interrupted: str = RESUME, bulk: bool = False) -> Any:
    """Run a command body: user-fixable errors become one `error:` line and an exit code. `bulk`: a
    command that builds or imports many rows (`BULK_GC_THRESHOLDS`)."""
    import gc

    from knowtree.store import dialect

    before = gc.get_threshold()
    if bulk:
        gc.set_threshold(*BULK_GC_THRESHOLDS)
    try:
        return fn()
    except KnowtreeError as exc:
        if os.environ.get("KNOWTREE_DEBUG"):
            raise
        raise err(command_hints(str(exc)), 1 if isinstance(exc, UserError) else 3) from None
    except (*dialect.DatabaseError, UnicodeDecodeError) as exc:  # a page found damaged, or a lock, past the checks made on open
        from knowtree.store.guard import as_sqlite_error, describe_sqlite_error

        error = exc if isinstance(exc, dialect.DatabaseError) else as_sqlite_error(exc)
        if error is None or os.environ.get("KNOWTREE_DEBUG"):  # a decoding error of something else
            raise
        raise err(command_hints(describe_sqlite_error(error)), 3) from None
    except KeyboardInterrupt:
        raise err(f"interrupted: {interrupted}", 130) from None
    finally:
        gc.set_threshold(*before)  # (a process that runs several commands: the tests' CliRunner)


def echo_json(data: Any, **dumps: Any) -> None:
    """Print `data` as JSON (indented by 2 unless `indent=` says otherwise)."""
    typer.echo(json.dumps(data, **{"indent": 2, **dumps}))


def echo_report(report: Any, as_json: bool, *, fallbacks: str = "") -> None:
    """A build's or an add's report: JSON (its fields, usage as a dict) or its one summary line,
    after a warning naming how many `fallbacks` (e.g. "node(s)") kept fallback metadata."""
    if as_json:
        echo_json({**report.__dict__, "usage": report.usage.model_dump()})
        return
    if fallbacks and report.fallbacks:
        typer.echo(f"warning: {report.fallbacks} {fallbacks} kept fallback metadata (see `knowtree show`)")
    typer.echo(report.line())
