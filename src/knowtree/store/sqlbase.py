"""The store's methods written once, in SQL that SQLite (>= 3.24) and PostgreSQL both run: trees,
nodes, documents, memories, the LLM cache and ledger, runs. `SQLiteStore` (store/sqlite.py) and
`PostgresStore` (store/postgres.py) add how they connect and what truly differs (`search_nodes`'
full-text search, the node rows' full-text twin in store/rows.py, `_lock_tree`).

A subclass provides `_tx()` (one write transaction yielding a connection), `_reading()` (a
connection to read on), `_lock_tree(c, name)` (serialize writers of one tree inside a transaction:
nothing on SQLite, whose write transaction is the database's one writer; an advisory lock on
PostgreSQL), `search_nodes`, `close` and `dialect`.
"""

from __future__ import annotations

import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime
from typing import Any, TypeVar

from knowtree.errors import NotFoundError, StoreError
from knowtree.llm.base import Completion
from knowtree.store import dialect as dialects  # its error tuples are read where caught
from knowtree.store.dialect import Dialect
from knowtree.store.names import owner_of
from knowtree.store.protocol import SaveHook, TreeHook, save_hook
from knowtree.store.rows import (
    MESSAGE_KEYS,
    delete_nodes,
    delete_tree_fts,
    insert_nodes,
    load_tree_nodes,
    message_row,
    touched,
    update_node_meta,
)
from knowtree.store.runs import mark_interrupted, process_alive, run_label, this_process
from knowtree.types import Document, Node, NodeMeta, TreeInfo, Usage

T = TypeVar("T")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class SQLStoreBase(ABC):
    """Everything of `Store`/`SQLStore` but the connection; see the module's docstring."""

    path: str
    dialect: Dialect
    #: the column ordering a table's rows as stored: SQLite's rowid, PostgreSQL's `seq` identity
    stored_order = "rowid"

    def __init__(self) -> None:
        self._on_save: list[SaveHook] = []
        self._on_delete: list[TreeHook] = []

    # -- what a dialect provides -----------------------------------------------------------------
    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def _tx(self) -> AbstractContextManager[Any]:
        """One write transaction yielding the connection (committed, or rolled back on error)."""

    @abstractmethod
    def _reading(self) -> AbstractContextManager[Any]:
        """A connection to read on."""

    def _lock_tree(self, c: Any, name: str) -> None:  # noqa: B027 - SQLite: nothing to do
        """Inside a write transaction: hold off other writers of the tree `name` until it ends."""

    def hold_tree(self, name: str) -> AbstractContextManager[object]:
        """Across transactions: one process at a time works on the tree `name` (a memory's add reads
        its state, then writes steps). Nothing on SQLite (as before: one process per memory)."""
        return nullcontext()

    @abstractmethod
    def search_nodes(self, name: str, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """Lexical search over node text and metadata: (node id, score), best first."""

    # -- hooks ---------------------------------------------------------------------------------
    def on_save_tree(self, fn: SaveHook | TreeHook) -> None:
        """Run `fn(connection, name, nodes)` at the end of every `save_tree`, in its transaction (an
        index kept with the tree: saved together or not at all), with the nodes just saved, so the
        hook need not read them back; a two-parameter `fn(connection, name)` is called without
        them. Registered by `KnowTree`."""
        self._on_save.append(save_hook(fn))

    def on_delete_tree(self, fn: TreeHook) -> None:
        """Run `fn(connection, name)` in every `delete_tree`'s transaction, before the tree row goes."""
        self._on_delete.append(fn)

    # -- plain SQL for modules that own their own tables (server: tenants, keys, jobs) --------
    def _query(self, sql: str, args: Sequence[object] = ()) -> list[tuple]:
        with self._reading() as c:
            return c.execute(sql, args).fetchall()

    def query(self, sql: str, args: Sequence[object] = ()) -> list[tuple]:
        """Read rows (one statement)."""
        return self._query(sql, args)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """One write transaction yielding the connection (rolled back on error)."""
        with self._tx() as c:
            yield c

    def read(self, fn: Callable[[Any], T]) -> T:
        """`fn(connection)`, for reads."""
        with self._reading() as c:
            return fn(c)

    def write(self, fn: Callable[[Any], T]) -> T:
        """`fn(connection)` in one write transaction (rolled back if it raises)."""
        with self._tx() as c:
            return fn(c)

    # -- trees ---------------------------------------------------------------------------------
    def save_tree(
        self,
        name: str,
        *,
        root_id: str,
        nodes: Sequence[Node],
        documents: Sequence[Document],
        model: str,
        settings: dict[str, object],
        kind: str = "document",
    ) -> None:
        """Replace the tree `name` with these nodes and documents, atomically."""
        parents: dict[str, str] = {}
        positions: dict[str, int] = {}
        for node in nodes:
            for i, child in enumerate(node.children):
                parents[child] = node.id
                positions[child] = i
        now = _now()
        try:
            with self._tx() as c:
                self._lock_tree(c, name)  # PostgreSQL: one writer of this tree at a time
                row = c.execute("SELECT created, updated FROM trees WHERE name = ?", (name,)).fetchone()
                created = row[0] if row else now
                updated = touched(row[1] if row else None)  # after any earlier save: the index's signature
                delete_tree_fts(c, name)
                c.execute("DELETE FROM nodes WHERE tree = ?", (name,))
                c.execute("DELETE FROM documents WHERE tree = ?", (name,))
                # a replaced tree keeps no message (the former INSERT OR REPLACE dropped them by cascade)
                c.execute("DELETE FROM messages WHERE tree = ?", (name,))
                c.execute(
                    "INSERT INTO trees(name, root_id, model, settings_json, created, updated, kind)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET root_id = excluded.root_id,"
                    " model = excluded.model, settings_json = excluded.settings_json,"
                    " created = excluded.created, updated = excluded.updated, kind = excluded.kind",
                    (name, root_id, model, json.dumps(settings, default=str), created, updated, kind),
                )
                c.executemany(
                    "INSERT INTO documents(tree, path, sha256, encoding, chars, text, added)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(name, d.path, d.sha256, d.encoding, len(d.text), d.text, now) for d in documents],
                )
                insert_nodes(c, name, nodes, parents, positions)
                # hooks: the tree's contextual index (retrieve/treeindex.py), in the same transaction;
                # a memory's index is brought up to date when it is first searched, so adding
                # messages stays linear
                for fn in self._on_save:
                    fn(c, name, nodes)
        except dialects.DatabaseError as exc:
            raise StoreError(
                f"{self.path}: could not save tree {name!r} ({exc}); the previous version is kept"
            ) from exc

    def delete_tree(self, name: str) -> None:
        with self._tx() as c:
            self._lock_tree(c, name)
            if not c.execute("SELECT 1 FROM trees WHERE name = ?", (name,)).fetchone():
                raise NotFoundError(f"no tree named {name!r} in {self.path}")
            delete_tree_fts(c, name)
            for fn in self._on_delete:  # its contextual index (retrieve/treeindex.py) goes with it
                fn(c, name)
            c.execute("DELETE FROM trees WHERE name = ?", (name,))

    def tree_exists(self, name: str) -> bool:
        return bool(self._query("SELECT 1 FROM trees WHERE name = ?", (name,)))

    def tree_names(self) -> list[str]:
        return [r[0] for r in self._query("SELECT name FROM trees ORDER BY name")]

    def tree_root_kind(self, name: str) -> tuple[str | None, str]:
        rows = self._query("SELECT root_id, kind FROM trees WHERE name = ?", (name,))
        if not rows:
            raise NotFoundError(self.missing_message(name))
        return rows[0][0], rows[0][1]

    def tree_info(self, name: str) -> TreeInfo:
        rows = self._query("SELECT root_id, model, created, updated, kind FROM trees WHERE name = ?", (name,))
        if not rows:
            raise NotFoundError(self.missing_message(name))
        root_id, model, created, updated, kind = rows[0]
        docs = self._query("SELECT COUNT(*) FROM documents WHERE tree = ?", (name,))[0][0]
        total, leaves, depth = self._query(
            "SELECT COUNT(*), SUM(CASE WHEN kind = 'leaf' THEN 1 ELSE 0 END), MAX(level) FROM nodes WHERE tree = ?", (name,)
        )[0]
        return TreeInfo(
            name=name,
            root_id=root_id,
            documents=docs,
            nodes=total or 0,
            leaves=leaves or 0,
            depth=depth or 0,
            created=created,
            updated=updated,
            model=model,
            kind=kind,
        )

    def missing_message(self, name: str) -> str:
        """The message of the NotFoundError for a missing tree: it names the trees there are."""
        names = self.tree_names()
        known = ", ".join(names) if names else "none yet: build one with KnowTree.build"
        return f"no tree named {name!r} in {self.path} (trees: {known})"

    _missing = missing_message  # the old private name (memory.py still calls it)

    def load_nodes(self, name: str, ids: Collection[str] | None = None) -> dict[str, Node]:
        if not self.tree_exists(name):
            raise NotFoundError(self.missing_message(name))
        return self.read(lambda c: load_tree_nodes(c, name, ids))

    def root_id(self, name: str) -> str:
        rows = self._query("SELECT root_id FROM trees WHERE name = ?", (name,))
        if not rows or not rows[0][0]:
            raise NotFoundError(self.missing_message(name))
        return rows[0][0]

    def documents(self, name: str) -> list[Document]:
        rows = self._query(
            f"SELECT path, text, encoding, sha256 FROM documents WHERE tree = ? ORDER BY {self.stored_order}",
            (name,),
        )
        return [Document(path=r[0], text=r[1], encoding=r[2], sha256=r[3]) for r in rows]

    # -- conversation memories: incremental updates -------------------------------------------
    def save_memory_step(
        self,
        name: str,
        *,
        root_id: str,
        nodes: Sequence[Node],
        parents: dict[str, str],
        removed: Sequence[str] = (),
        messages: Sequence[dict[str, object]] = (),
        forgotten: Sequence[int] = (),
        model: str,
        settings: dict[str, object],
        kind: str = "conversation",
    ) -> None:
        """Upsert changed nodes and append new messages of a memory, atomically (no full replace).

        `parents` maps each changed node's id to its parent's; `messages` are rows of the messages
        table (position, role, name, content, timestamp, time, session, source_id, attachment, node_id);
        `forgotten` the positions of messages deleted (`Memory.delete_message`): their rows go.
        """
        now = _now()
        positions = {}
        for node in nodes:
            for i, child in enumerate(node.children):
                positions[child] = i
        try:
            with self._tx() as c:
                self._lock_tree(c, name)  # PostgreSQL: steps of one memory one after another
                row = c.execute("SELECT created, kind, updated FROM trees WHERE name = ?", (name,)).fetchone()
                if row and row[1] != kind:
                    raise StoreError(f"{name!r} is a {row[1]} tree, not a {kind}: choose another name")
                if row:
                    c.execute(
                        "UPDATE trees SET root_id = ?, model = ?, settings_json = ?, updated = ? WHERE name = ?",
                        (root_id, model, json.dumps(settings, default=str), touched(row[2]), name),
                    )
                else:
                    c.execute(
                        "INSERT INTO trees(name, root_id, model, settings_json, created, updated, kind)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (name, root_id, model, json.dumps(settings, default=str), now, now, kind),
                    )
                delete_nodes(c, name, [*removed, *(n.id for n in nodes)])
                insert_nodes(c, name, nodes, parents, positions)
                c.executemany(
                    "INSERT INTO messages(tree, position, role, name, content, timestamp, time, session,"
                    " source_id, attachment, node_id, add_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [message_row(name, m) for m in messages],
                )
                c.executemany("DELETE FROM messages WHERE tree = ? AND position = ?", [(name, p) for p in forgotten])
        except dialects.DatabaseError as exc:
            raise StoreError(
                f"{self.path}: could not update memory {name!r} ({exc}); the previous version is kept"
            ) from exc

    def load_messages(self, name: str, start: int = 0, end: int | None = None) -> list[dict[str, object]]:
        """Messages of a memory with position in [start, end), in order."""
        rows = self._query(
            "SELECT position, role, name, content, timestamp, time, session, source_id, attachment, node_id"
            " FROM messages WHERE tree = ? AND position >= ? AND position < ? ORDER BY position",
            (name, _sql_int(start), _sql_int(end) if end is not None else 2**62),
        )
        return [dict(zip(MESSAGE_KEYS, r, strict=True)) for r in rows]

    def stored_add_keys(self, name: str, keys: Collection[str]) -> set[str]:
        """Which of `keys` (messages' add keys) the memory `name` holds already."""
        found: set[str] = set()
        wanted = list(dict.fromkeys(keys))
        for i in range(0, len(wanted), 500):  # SQLite's limit on bound parameters
            part = wanted[i : i + 500]
            found.update(r[0] for r in self._query(
                f"SELECT add_key FROM messages WHERE tree = ? AND add_key IN ({', '.join('?' * len(part))})",
                (name, *part),
            ))
        return found

    def tree_settings(self, name: str) -> dict[str, object]:
        rows = self._query("SELECT settings_json FROM trees WHERE name = ?", (name,))
        if not rows:
            raise NotFoundError(self.missing_message(name))
        return json.loads(rows[0][0] or "{}")

    def update_node_meta(self, name: str, node: Node, meta: NodeMeta) -> None:
        """Replace a stored node's metadata (a summary computed after the build), full text included;
        the tree's `updated` time moves on, so its index sees the new metadata on its next use."""
        with self._tx() as c:
            self._lock_tree(c, name)
            update_node_meta(c, name, node, meta)

    # -- LLM cache and ledger (the CallStore protocol) -----------------------------------------
    def cache_get(self, key: str) -> Completion | None:
        rows = self._query("SELECT completion_json FROM llm_cache WHERE key = ?", (key,))
        return Completion.model_validate_json(rows[0][0]) if rows else None

    def _derived_write(self, c: Any) -> None:  # noqa: B027 - SQLite: nothing to do
        """Inside a write transaction of rows that can be made again (the model-call cache, the
        ledger): a backend may commit it without waiting for its flush to disk."""

    @contextmanager
    def _derived_tx(self) -> Iterator[Any]:
        """A write transaction of rows that can be made again (`_derived_write`'s); a backend may send
        it in fewer round trips (PostgreSQL: pipelined). Its statements' results are not read."""
        with self._tx() as c:
            self._derived_write(c)
            yield c

    def cache_put(self, key: str, model_id: str, completion: Completion) -> None:
        with self._derived_tx() as c:
            self._cache_row(c, key, model_id, completion)

    def cache_delete(self, keys: list[str]) -> None:
        with self._tx() as c:
            c.executemany("DELETE FROM llm_cache WHERE key = ?", [(k,) for k in keys])

    def record_call(
        self,
        *,
        run_id: str | None,
        key: str,
        model_id: str,
        purpose: str,
        cached: bool,
        usage: Usage,
        error: str | None,
    ) -> None:
        with self._derived_tx() as c:
            self._call_row(c, (run_id, key, model_id, purpose, cached, usage, error))

    def put_reply(
        self, key: str, model_id: str, completion: Completion, *, run_id: str | None, purpose: str, usage: Usage
    ) -> None:
        """A model's fresh reply: its cache row and its ledger row in one transaction (on PostgreSQL
        one pipeline, one round trip): neither is kept without the other."""
        with self._derived_tx() as c:
            self._cache_row(c, key, model_id, completion)
            self._call_row(c, (run_id, key, model_id, purpose, False, usage, None))

    @staticmethod
    def _cache_row(c: Any, key: str, model_id: str, completion: Completion) -> None:
        c.execute(
            "INSERT INTO llm_cache(key, model, completion_json, created) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (key) DO UPDATE SET model = excluded.model,"
            " completion_json = excluded.completion_json, created = excluded.created",
            (key, model_id, completion.model_dump_json(), _now()),
        )

    @staticmethod
    def _call_row(c: Any, call: tuple[str | None, str, str, str, bool, Usage, str | None]) -> None:
        """The ledger row of `call`: (run id, key, model id, purpose, cached, usage, error)."""
        run_id, key, model_id, purpose, cached, usage, error = call
        c.execute(
            "INSERT INTO llm_calls(run_id, key, model, purpose, cached, input_tokens, output_tokens,"
            " seconds, cost_usd, error, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, key, model_id, purpose, int(cached), usage.input_tokens, usage.output_tokens,
             usage.seconds, usage.cost_usd, error, _now()),
        )

    def start_run(self, kind: str, tree: str | None, detail: str = "", *, space: str = "tree") -> str:
        """Record a run about `tree` (a knowledge base's name with `space="kb"`) as 'running' with
        this process's pid and host; runs whose process is gone (killed) are marked 'interrupted' on
        the way. Its owner (store/names.py) is kept apart from its label."""
        run_id = uuid.uuid4().hex[:12]
        pid, host = this_process()
        label = run_label(space, tree)
        with self._tx() as c:
            mark_interrupted(c, _now())
            c.execute(
                "INSERT INTO runs(id, kind, tree, detail, status, started, pid, host, space, subject, owner)"
                " VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?)",
                (run_id, kind, label, detail, _now(), pid, host, space, tree, owner_of(tree)),
            )
        return run_id

    def finish_run(self, run_id: str, status: str) -> None:
        with self._tx() as c:
            c.execute("UPDATE runs SET status = ?, finished = ? WHERE id = ?", (status, _now(), run_id))

    def run_usage(self, run_id: str) -> Usage:
        row = self._query(
            "SELECT SUM(1 - cached), SUM(cached), SUM(input_tokens), SUM(output_tokens), SUM(cost_usd),"
            " SUM(seconds) FROM llm_calls WHERE run_id = ?",
            (run_id,),
        )[0]
        return Usage(
            calls=row[0] or 0,
            cached=row[1] or 0,
            input_tokens=row[2] or 0,
            output_tokens=row[3] or 0,
            cost_usd=row[4] or 0.0,
            seconds=row[5] or 0.0,
        )

    def runs(self, tree: str | None = None, limit: int = 20, *, owner: str | None = None) -> list[dict[str, object]]:
        """The latest runs (of the label `tree`; of the subjects `owner` owns, exactly); a 'running'
        run whose process is gone shows as 'interrupted'."""
        sql = "SELECT id, kind, tree, detail, status, started, finished, space, subject, pid, host FROM runs"
        where, args = [], []
        if tree:
            where.append("tree = ?")
            args.append(tree)
        if owner is not None:
            where.append("owner = ?")
            args.append(owner)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY started DESC, {self.stored_order} DESC LIMIT ?"
        rows = self._query(sql, (*args, limit))
        keys = ("id", "kind", "tree", "detail", "status", "started", "finished", "space", "subject")
        out: list[dict[str, object]] = []
        for r in rows:
            item: dict[str, object] = dict(zip(keys, r[:9], strict=True))
            if item["status"] == "running" and not process_alive(r[9], r[10]):
                item["status"] = "interrupted"
            item["usage"] = self.run_usage(str(r[0])).model_dump()
            out.append(item)
        return out


def search_terms(query: str) -> list[str]:
    """The words of a `search_nodes` query (letters and digits, two characters or more)."""
    return [t for t in "".join(ch if ch.isalnum() else " " for ch in query).split() if len(t) > 1]


def _sql_int(n: int) -> int:
    """`n` within a 64-bit integer's range (a bound past it means "no bound"; binding it would raise)."""
    return max(-(2**63), min(n, 2**63 - 1))
