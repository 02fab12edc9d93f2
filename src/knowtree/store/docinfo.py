"""Store helpers for structured documents: document descriptions and metadata, expert notes,
and metadata added to a node after the build (lazy summaries). Tables from migration 4.

Only the store's public methods (`transaction`, `query`, `update_node_meta`) are used."""

from __future__ import annotations

import json

from knowtree.errors import NotFoundError
from knowtree.records import DocInfo, ExpertNote
from knowtree.store.portable import now, stored_order
from knowtree.store.protocol import SQLStore
from knowtree.store.rows import touch_tree
from knowtree.types import Node, NodeMeta

__all__ = ["DocInfo", "ExpertNote"]


def save_doc_infos(store: SQLStore, tree: str, infos: list[DocInfo]) -> None:
    """Replace a collection's document lines; its tree (when saved already) is marked changed, so its
    index, whose entries carry these lines, re-syncs on its next use."""
    with store.transaction() as c:
        c.execute("DELETE FROM doc_info WHERE tree = ?", (tree,))
        touch_tree(c, tree)
        c.executemany(
            "INSERT INTO doc_info(tree, path, node_id, description, meta_json, pages, source)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    tree,
                    i.path,
                    i.node_id,
                    i.description,
                    json.dumps(i.meta, sort_keys=True),
                    i.pages,
                    i.source,
                )
                for i in infos
            ],
        )


def doc_infos(store: SQLStore, tree: str) -> list[DocInfo]:
    rows = store.query(
        "SELECT path, node_id, description, meta_json, pages, source FROM doc_info WHERE tree = ?"
        f" ORDER BY {stored_order(store)}",
        (tree,),
    )
    return [DocInfo(r[0], r[1], r[2], json.loads(r[3] or "{}"), r[4], r[5]) for r in rows]


def delete_doc_infos(store: SQLStore, tree: str) -> None:
    with store.transaction() as c:
        c.execute("DELETE FROM doc_info WHERE tree = ?", (tree,))
        touch_tree(c, tree)


def update_node_meta(store: SQLStore, tree: str, node: Node, meta: NodeMeta) -> None:
    """Keep metadata computed after the build (a lazy summary) with the node, and in the FTS index."""
    store.update_node_meta(tree, node, meta)


# -- expert notes ----------------------------------------------------------------------------------
def add_expert(store: SQLStore, scope: str, text: str) -> ExpertNote:
    text = " ".join(text.split())
    if not text:
        from knowtree.errors import UserError

        raise UserError("an expert note needs some text")
    created = now()
    with store.transaction() as c:
        row = c.execute(
            "INSERT INTO experts(scope, text, created) VALUES (?, ?, ?) RETURNING id", (scope, text, created)
        ).fetchone()
        note_id = int(row[0])
    return ExpertNote(note_id, scope, text, created)


def list_experts(store: SQLStore, scope: str | None = None) -> list[ExpertNote]:
    if scope is None:
        rows = store.query("SELECT id, scope, text, created FROM experts ORDER BY id")
    else:
        rows = store.query(
            "SELECT id, scope, text, created FROM experts WHERE scope IN (?, '*') ORDER BY id", (scope,)
        )
    return [ExpertNote(*r) for r in rows]


def remove_expert(store: SQLStore, note_id: int) -> None:
    with store.transaction() as c:
        if not c.execute("SELECT 1 FROM experts WHERE id = ?", (note_id,)).fetchone():
            raise NotFoundError(f"no expert note with id {note_id} in {store.path}")
        c.execute("DELETE FROM experts WHERE id = ?", (note_id,))
