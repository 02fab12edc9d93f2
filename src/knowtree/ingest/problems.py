"""Naming what is wrong with input files: every bad file at once, and why a path cannot be opened.

A build reads every input before it stores anything. With several bad files the user should learn
about all of them in one run, not one per attempt: `BadFilesError` carries each file's `InputError`.
With `skip_bad`, the loaders build from the good files and return the bad ones as `Skipped` records.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from knowtree.errors import InputError
from knowtree.ingest.roots import ReadRoots

T = TypeVar("T")
#: `mapper(fn, paths)` → `[fn(path) for path in paths]`, in order, wherever it runs them; `fn` returns
#: what it read or the `InputError` that stopped it
Mapper = Callable[[Callable[[str], Any], list[str]], list[Any]]


@dataclass(frozen=True)
class Skipped:
    """A file left out of a build with `--skip-bad`, and why."""

    path: str
    reason: str

    def line(self) -> str:
        return f"{self.path}: {self.reason}"


class BadFilesError(InputError):
    """Several inputs cannot be used; `problems` holds one `InputError` per file, in input order."""

    def __init__(self, problems: list[InputError]) -> None:
        self.problems = problems
        listed = "; ".join(str(p) for p in problems)
        message = f"{len(problems)} inputs cannot be used, nothing was stored: {listed} (--skip-bad builds the rest)"
        # `path` is the first bad file (as a single InputError's would be); the message names them all
        self.path = problems[0].path
        self.reason = message
        Exception.__init__(self, message)


def raise_problems(problems: list[InputError]) -> None:
    """One problem raises itself (unchanged message); several raise a `BadFilesError` naming each."""
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise BadFilesError(problems)


def load_each(
    entries: Sequence[str],
    expand: Callable[[str], list[str]],
    load: Callable[[str], T],
    *,
    skip_bad: bool,
    skipped: list[Skipped] | None,
    within: ReadRoots | None = None,
    mapper: Mapper | None = None,
) -> list[T]:
    """Expand every entry (a missing path fails before any file is read), load each file once (the
    same file reached twice, by any route, compared by resolved path, is loaded once), collecting
    every problem: one bad entry or file raises its `InputError`, several a `BadFilesError`; with
    `skip_bad` the bad ones go to `skipped` instead (an error only when no file is good). `within`:
    every file, however it was found, is checked against these roots just before it is read.
    `mapper(fn, paths)`: runs the reads elsewhere (Ray tasks: `knowtree.distributed.RayMapper`), a
    result per path in order; the default reads them here, one after another."""
    problems: list[InputError] = []
    found: list[str] = []
    seen: set[str] = set()
    for entry in entries:
        try:
            expanded = expand(entry)
        except InputError as exc:
            problems.append(exc)
            continue
        for path in expanded:
            key = os.path.realpath(path)
            if key not in seen:
                seen.add(key)
                found.append(path)
    def attempt(path: str) -> T | InputError:
        try:
            if within is not None:
                within.check(path)
            return load(path)
        except InputError as exc:
            return exc

    out: list[T] = []
    for result in (mapper(attempt, found) if mapper is not None else map(attempt, found)):
        if isinstance(result, InputError):
            problems.append(result)
        else:
            out.append(result)  # type: ignore[arg-type]
    if problems and (not skip_bad or not out):
        raise_problems(problems)
    if skipped is not None:
        skipped.extend(Skipped(p.path, p.reason) for p in problems)
    return out


def missing_reason(path: str) -> str:
    """Why `path`, which does not resolve to an existing file, cannot be opened: a symbolic link loop,
    a broken link (and where it points), or plain absence."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop (following its links never reaches a file)"
        if os.path.islink(path):
            return f"broken symbolic link (points to {os.readlink(path)!r}, which does not exist)"
        return "no such file or directory"
    return "not a regular file"
