"""Nothing a user stored is replaced unless asked: the checks a build, an import or a removal make
before they touch an existing tree.

* `check_target`: building onto a tree of another kind (a conversation memory), or rebuilding a
  document tree without some of the documents it holds, is refused unless `replace` (`--replace`)
  or, for documents, `add` (`--add`) says what to do with them. A rebuild from the same inputs
  (the incremental rebuild) passes.
* `match_document`: `rm --doc X` names exactly one stored document: its stored path, or a unique
  suffix of it at a folder boundary; an ambiguous name lists the candidates.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from knowtree.errors import NotFoundError, UserError

if TYPE_CHECKING:
    from knowtree.store import SQLiteStore

_SHOWN = 5


def _listing(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:_SHOWN])
    return shown + (f", ... ({len(paths)} in all)" if len(paths) > _SHOWN else "")


def _norm(path: str) -> str:
    return os.path.normpath(path)


def describe_tree(store: SQLiteStore, name: str) -> str:
    info = store.tree_info(name)
    if info.kind == "conversation":
        count = len(store.load_messages(name))
        return f"a conversation memory with {count} message(s)"
    return f"a {info.kind} tree with {info.documents} document(s)"


def check_target(
    store: SQLiteStore,
    tree: str,
    *,
    kind: str,
    paths: Iterable[str] | None = None,
    add: bool = False,
    replace: bool = False,
    action: str = "building",
) -> None:
    """Raise `UserError` when `action` onto the existing tree `tree` would silently replace what it
    holds. `paths`: the documents the new tree will hold (None: any existing tree is refused)."""
    if replace or not store.tree_exists(tree):
        return
    info = store.tree_info(tree)
    if info.kind != kind or paths is None:
        raise UserError(
            f"tree {tree!r} already exists ({describe_tree(store, tree)}); {action} would replace it: "
            "choose another --tree, or pass --replace to replace it"
        )
    if add:
        return
    new = {_norm(p) for p in paths}
    dropped = [d.path for d in store.documents(tree) if _norm(d.path) not in new]
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
