"""Nothing a user stored is replaced unless asked: the checks a build, an import or a removal make
before they touch an existing tree.

* `check_stored`: building onto a tree of another kind (a conversation memory), or rebuilding a
  document tree without some of the documents it holds, is refused unless `replace` (`--replace`)
  or, for documents, `add` (`--add`) says what to do with them. A rebuild from the same inputs
  (the incremental rebuild) passes. It judges a `StoredTree`, what the facade read of the tree
  (`knowtree.building.check_target` reads it from the store).
* `match_document`: `rm --doc X` names exactly one stored document: its stored path, or a unique
  suffix of it at a folder boundary; an ambiguous name lists the candidates.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from knowtree.errors import NotFoundError, UserError

_SHOWN = 5


def _listing(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:_SHOWN])
    return shown + (f", ... ({len(paths)} in all)" if len(paths) > _SHOWN else "")


def _norm(path: str) -> str:
    return os.path.normpath(path)


@dataclass
class StoredTree:
    """What an existing tree holds, as far as the guards need to know."""

    kind: str
    holds: str  # "a conversation memory with 3 message(s)", "a document tree with 2 document(s)"
    paths: list[str]  # its documents' stored paths


def check_stored(
    stored: StoredTree | None,
    tree: str,
    *,
    kind: str,
    paths: Iterable[str] | None = None,
    add: bool = False,
    replace: bool = False,
    action: str = "building",
) -> None:
    """Raise `UserError` when `action` onto the existing tree `tree` (`stored`; None: there is none)
    would silently replace what it holds. `paths`: the documents the new tree will hold (None: any
    existing tree is refused)."""
    if replace or stored is None:
        return
    if stored.kind != kind or paths is None:
        raise UserError(
            f"tree {tree!r} already exists ({stored.holds}); {action} would replace it: "
            "choose another --tree, or pass --replace to replace it"
        )
    if add:
        return
    new = {_norm(p) for p in paths}
    dropped = [p for p in stored.paths if _norm(p) not in new]
    if dropped:
        raise UserError(
            f"tree {tree!r} holds {len(dropped)} document(s) not in this build ({_listing(dropped)}): "
            "pass --add to keep them and add these, or --replace to rebuild it from these inputs only"
        )


def match_document(stored: Sequence[str], query: str, tree: str) -> str:
    """The one stored path `query` names: exact, normalized, or a unique suffix at a '/' boundary."""
    if query in stored:
        return query
    q = _norm(query)
    exact = [p for p in stored if _norm(p) == _norm(query)]
    if len(exact) == 1:
        return exact[0]
    by_suffix = [p for p in stored if _norm(p).endswith("/" + q) or _norm(p) == q]
    if not by_suffix and os.path.exists(query):  # the same file named another way (absolute...)
        real = os.path.realpath(query)
        by_suffix = [p for p in stored if os.path.realpath(p) == real]
    if len(by_suffix) == 1:
        return by_suffix[0]
    if not by_suffix:
        raise NotFoundError(
            f"no document {query!r} in tree {tree!r} (documents: {_listing(list(stored)) or 'none'})"
        )
    raise UserError(
        f"{query!r} matches {len(by_suffix)} documents in tree {tree!r}: {_listing(by_suffix)}; "
        "give the full stored path of the one to remove"
    )
