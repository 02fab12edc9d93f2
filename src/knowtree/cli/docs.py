"""`knowtree export` and `knowtree import`: trees as PageIndex-style JSON, memories as ChatIndex-style."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from knowtree.cli.common import echo_json, open_kt, run
from knowtree.cli.options import DbOpt, TreeArg


def export_command(
    tree: TreeArg,
    db: DbOpt = None,
    format: Annotated[
        str, typer.Option("--format", help="pageindex | chatindex (conversation memories)")
    ] = "pageindex",
    text: Annotated[bool, typer.Option("--text/--no-text", help="include the leaves' text")] = True,
) -> None:
    """Write a tree as PageIndex-style JSON (structure, title, node_id, start_index/end_index, summary,
    nodes), or a conversation memory as ChatIndex-style JSON (topics with their messages)."""
    from knowtree.errors import UserError
    from knowtree.interop.pageindex import dumps, export_tree
    from knowtree.store.docinfo import doc_infos

    def go() -> None:
        if format not in ("pageindex", "chatindex"):
            raise UserError(f"unknown export format {format!r} (known: pageindex, chatindex)")
        with open_kt(db=db, create=False) as kt:
            t = kt.tree(tree)
            if format == "chatindex":
                from knowtree.interop.chatindex import export_memory

                if t.info.kind != "conversation":
                    raise UserError(f"--format chatindex exports conversation memories; {tree!r} is a {t.info.kind} tree")
                settings = kt.store.tree_settings(tree)
                data = export_memory(
                    t.nodes,
                    t.root.id,
                    kt.store.load_messages(tree),
                    max_children=int(settings.get("max_children") or kt.settings.max_children),  # type: ignore[call-overload]
                )
                echo_json(data, ensure_ascii=False)
                return
            descriptions = {i.path: i.description for i in doc_infos(kt.store, tree)}
            data = export_tree(t.nodes, t.root.id, name=tree, descriptions=descriptions, with_text=text)
        typer.echo(dumps(data))

    run(go)


def import_command(
    file: Annotated[str, typer.Argument(help="PageIndex JSON (a tree) or ChatIndex JSON (a conversation memory)")],
    tree: Annotated[str, typer.Option("--tree", "-t", help="name of the tree or memory to create")] = "default",
    db: DbOpt = None,
    replace: Annotated[bool, typer.Option("--replace", help="replace an existing tree of that name")] = False,
) -> None:
    """Read a PageIndex-style JSON tree, or a ChatIndex-style conversation memory (as `export
    --format chatindex` writes it), into the database (no model call). An existing tree of that name
    is kept (an error) unless --replace."""
    from knowtree.errors import InputError
    from knowtree.interop.chatindex import is_chatindex

    def go() -> None:
        try:
            with open(file, encoding="utf-8") as f:
                data = json.load(f)
        except OSError as exc:
            raise InputError(file, f"cannot be read ({exc.strerror or exc})") from exc
        except json.JSONDecodeError as exc:
            raise InputError(file, f"not valid JSON ({exc.msg} at line {exc.lineno})") from exc
        except UnicodeDecodeError as exc:
            raise InputError(file, f"not UTF-8 text ({exc.reason})") from exc
        typer.echo(_import_memory(data, file, tree, db, replace) if is_chatindex(data) else _import_tree(data, file, tree, db, replace))

    run(go, bulk=True)


def _import_tree(data: object, file: str, tree: str, db: str | None, replace: bool) -> str:
    from knowtree.building import check_target
    from knowtree.interop.pageindex import document_nodes, import_tree
    from knowtree.store.docinfo import DocInfo, save_doc_infos

    nodes, root_id, docs = import_tree(data, file)
    description = str(data.get("doc_description") or "") if isinstance(data, dict) else ""
    with open_kt(db=db) as kt:
        check_target(kt.store, tree, kind="document", replace=replace, action=f"importing {file}")
        kt.store.save_tree(
            tree,
            root_id=root_id,
            nodes=nodes,
            documents=docs,
            model="import",
            settings={"summaries": "none", "imported": file},
            kind="document",
        )
        infos = [
            DocInfo(path=path, node_id=node, description=description if len(docs) == 1 else "", source="pageindex")
            for path, node in document_nodes(nodes, root_id, docs)
        ]
        save_doc_infos(kt.store, tree, infos)
    return f"imported tree {tree!r}: {len(nodes)} nodes from {file}"


def _import_memory(data: object, file: str, tree: str, db: str | None, replace: bool) -> str:
    from knowtree.building import check_target
    from knowtree.interop.chatindex import import_memory

    with open_kt(db=db) as kt:
        memory = import_memory(data, file, tree, max_children=kt.settings.max_children)
        check_target(kt.store, tree, kind="conversation", replace=replace, action=f"importing {file}")
        if replace and kt.store.tree_exists(tree):
            kt.delete(tree)  # asked for (--replace); the import was read and checked first
        kt.store.save_memory_step(
            tree,
            root_id=memory.root_id,
            nodes=memory.nodes,
            parents=memory.parents,
            messages=memory.messages,
            model="import",
            settings={"max_children": memory.max_children, "memory_state": memory.state, "imported": file},
            kind="conversation",
        )
    return (
        f"imported memory {tree!r}: {len(memory.messages)} messages in {memory.topics} topic(s) from {file}"
    )
