"""What the HTTP routes and the MCP tools do, per caller: one place that maps a tenant's names to
stored trees and calls the library (`KnowTree`, `Tree`, `Memory`) — the same calls the CLI makes.

Every operation takes the caller's `Principal` first; a tree that is not the caller's is reported
exactly like one that does not exist.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from knowtree.adapters.evidence import Evidence
from knowtree.adapters.evidence import retrieve as retrieve_evidence
from knowtree.core import KnowTree
from knowtree.errors import InputError, NotFoundError
from knowtree.ingest.limits import inflate_limit
from knowtree.ingest.roots import ReadRoots
from knowtree.server.config import ServerConfig
from knowtree.server.idempotency import keyed
from knowtree.server.job_files import JobFiles
from knowtree.server.jobs import Job, JobStore
from knowtree.server.kbs import KINDS as KB_JOBS
from knowtree.server.kbs import KBService
from knowtree.server.models import (
    AskRequest,
    NodeBrief,
    NodeView,
    OutlineNode,
    SearchHit,
    TreeSummary,
)
from knowtree.server.problems import Problem
from knowtree.server.tenancy import LOCAL, Principal
from knowtree.store.dialect import is_url
from knowtree.store.runs import run_label
from knowtree.tree import Tree
from knowtree.types import Answer, NavStep, Node, TreeInfo

log = logging.getLogger("knowtree.server")

TENANT_TREE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
VIEW_CACHE_TREES = 64  # loaded trees kept for reads
ADMIN_TREE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


class Service(JobFiles):
    def __init__(self, kt: KnowTree, config: ServerConfig) -> None:
        self.kt = kt
        self.config = config
        self.jobs = JobStore(kt.store, lease_seconds=config.job_lease_seconds)
        self.worker: Any = None  # the JobWorker, when this process runs jobs
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._views: dict[str, tuple[tuple[Any, ...], Tree]] = {}
        self.kbs = KBService(self)

    def write_lock(self, stored: str, space: str = "tree") -> threading.Lock:
        """One writer per tree (or knowledge base, `space="kb"`) at a time (a memory's adds, a
        build): concurrent adds would race."""
        with self._locks_guard:
            return self._locks.setdefault((space, stored), threading.Lock())

    def wake_worker(self) -> None:
        if self.worker is not None:
            self.worker.wake()

    def upload_root(self) -> Path:
        if self.config.upload_dir is not None:
            return self.config.upload_dir
        db = self.kt.settings.db
        if db == ":memory:" or is_url(db):  # no folder of the database's to put them beside
            import tempfile

            return Path(tempfile.gettempdir()) / "knowtree-uploads"
        return Path(db).resolve().parent / f"{Path(db).name}.uploads"

    # -- names and ownership -------------------------------------------------------------------
    def stored_name(self, p: Principal, name: str) -> str:
        pattern = ADMIN_TREE_NAME if p.admin else TENANT_TREE_NAME
        if not pattern.match(name):
            raise Problem(400, f"tree name {name!r}: use letters, digits, '.', '_' or '-' (at most 64)")
        return p.stored(name)

    def require(self, p: Principal, name: str) -> str:
        stored = self.stored_name(p, name)
        if not self.kt.store.tree_exists(stored):
            raise Problem(404, f"no tree named {name!r}")
        return stored

    @staticmethod
    def writable(p: Principal) -> None:
        if p.read_only:
            raise Problem(403, "this API key is read-only")

    def summary(self, p: Principal, info: TreeInfo) -> TreeSummary:
        data = info.model_dump()
        data["name"] = p.shown(info.name) or info.name
        return TreeSummary(**{k: data[k] for k in TreeSummary.model_fields})

    # -- trees ---------------------------------------------------------------------------------
    def list_trees(self, p: Principal) -> list[TreeSummary]:
        names = [n for n in self.kt.store.tree_names() if p.shown(n) is not None]
        return [self.summary(p, self.kt.store.tree_info(n)) for n in names]

    def tree(self, p: Principal, name: str) -> Tree:
        """A fresh `Tree` (for asking)."""
        return self.kt.tree(self.require(p, name))

    def view(self, p: Principal, name: str) -> Tree:
        """A `Tree` to read (outline, nodes, search, retrieve), cached until the tree changes: loading
        every node per request was most of a read's cost."""
        stored = self.require(p, name)
        rows = self.kt.store.query(
            "SELECT updated, root_id, (SELECT COUNT(*) FROM nodes WHERE tree = ?) FROM trees WHERE name = ?",
            (stored, stored),
        )
        if not rows:
            raise Problem(404, f"no tree named {name!r}")
        key = tuple(rows[0])
        with self._locks_guard:
            hit = self._views.get(stored)
        if hit is not None and hit[0] == key:
            return hit[1]
        t = self.kt.tree(stored)
        t.nodes  # noqa: B018 - load them now, outside the guard
        with self._locks_guard:
            self._views.pop(stored, None)
            self._views[stored] = (key, t)
            while len(self._views) > VIEW_CACHE_TREES:  # least recently loaded first
                self._views.pop(next(iter(self._views)))
        return t

    def forget(self, stored: str) -> None:
        with self._locks_guard:
            self._views.pop(stored, None)

    def delete_tree(self, p: Principal, name: str) -> None:
        self.writable(p)
        stored = self.require(p, name)
        with self.write_lock(stored):
            self.kt.delete(stored)
            self.forget(stored)

    def delete_document(self, p: Principal, name: str, path: str) -> None:
        self.writable(p)
        stored = self.require(p, name)
        if self.kt.store.tree_info(stored).kind == "conversation":
            raise Problem(400, f"{name!r} is a conversation memory: it has no documents")
        with self.write_lock(stored):
            self.kt.remove_document(stored, path)
            self.forget(stored)

    def node_view(self, p: Principal, name: str, node_id: str) -> NodeView:
        t = self.view(p, name)
        node = self._node(t, name, node_id)
        parent = next((n.id for n in t.nodes.values() if node.id in n.children), None)
        return NodeView(
            tree=name,
            id=node.id,
            kind=node.kind.value,
            level=node.level,
            meta=node.meta,
            text=node.text,
            spans=node.spans,
            parent=parent,
            children=[brief(t.nodes[c]) for c in node.children if c in t.nodes],
        )

    @staticmethod
    def _node(t: Tree, name: str, node_id: str) -> Node:
        if not re.fullmatch(r"[0-9A-Za-z_-]{1,64}", node_id):
            raise Problem(400, f"node id {node_id!r}: letters, digits, '_' or '-'")
        matches = [n for i, n in t.nodes.items() if i.startswith(node_id)]
        if len(matches) != 1:
            raise Problem(404, f"no node {node_id!r} in tree {name!r}" if not matches else
                          f"{len(matches)} nodes start with {node_id!r}: give more of the id")
        return matches[0]

    def outline(self, p: Principal, name: str, depth: int | None = None) -> tuple[TreeSummary, OutlineNode | None]:
        t = self.view(p, name)
        if t.info.root_id is None or t.info.root_id not in t.nodes:
            return self.summary(p, t.info), None

        def walk(node: Node, level: int) -> OutlineNode:
            b = brief(node)
            out = OutlineNode(id=node.id, kind=b.kind, title=b.title, summary=b.summary, spans=node.spans)
            if depth is not None and level >= depth:
                out.more = len(node.children)
                return out
            out.children = [walk(t.nodes[c], level + 1) for c in node.children if c in t.nodes]
            return out

        return self.summary(p, t.info), walk(t.root, 0)

    def search(self, p: Principal, name: str, query: str, limit: int = 10) -> list[SearchHit]:
        t = self.view(p, name)
        stored = t.name
        hits = []
        for node_id, score in self.kt.store.search_nodes(stored, query, limit):
            n = t.nodes.get(node_id)
            if n is not None:
                b = brief(n)
                hits.append(SearchHit(node_id=n.id, score=score, title=b.title, summary=b.summary, spans=n.spans))
        return hits

    # -- questions -----------------------------------------------------------------------------
    def ask(
        self,
        p: Principal,
        name: str,
        req: AskRequest,
        *,
        on_step: Callable[[NavStep], None] | None = None,
        on_token: Callable[[str], None] | None = None,
    ) -> Answer:
        t = self.tree(p, name)
        if t.info.kind == "conversation":
            if req.mode == "search":
                raise Problem(
                    400, "mode 'search': a conversation memory answers in auto | retrieve | nav | walk mode"
                    " (navigator tree | agent)"
                )
            return self.kt.memory(t.name).ask(
                req.question,
                mode=req.mode,
                navigator=req.navigator,
                budget_tokens=req.budget_tokens,
                on_step=on_step,
                on_token=on_token,
            )
        if req.mode in ("tree", "agent") or req.navigator:
            raise Problem(
                400, "tree | agent (navigator) is for conversation memories; documents: auto | walk | search | retrieve | nav"
            )
        return t.ask(
            req.question,
            on_step=on_step,
            max_branch_attempts=req.max_branch_attempts,
            leaves_per_branch=req.leaves_per_branch,
            mode=req.mode,
            strategy=req.strategy,
            budget_tokens=req.budget_tokens,
        )

    def retrieve(
        self, p: Principal, name: str, question: str, budget_tokens: int = 1000, use_model: bool = False
    ) -> tuple[str, list[Evidence]]:
        """Evidence only, no answer (see `knowtree.adapters.evidence`)."""
        return retrieve_evidence(self.kt, self.view(p, name), question, budget_tokens, use_model=use_model)

    # -- memories ------------------------------------------------------------------------------
    def add_messages(self, p: Principal, name: str, messages: list[dict[str, Any]], batch_size: int | None = None,
                     idem_key: str | None = None) -> Any:
        """Add now; messages stored already under their add key are skipped (`server.idempotency`)."""
        self.writable(p)
        stored = self.stored_name(p, name)
        if self.kt.store.tree_exists(stored) and self.kt.store.tree_info(stored).kind != "conversation":
            raise Problem(409, f"{name!r} is a document tree, not a conversation memory")
        with self.write_lock(stored):
            try:
                return self.kt.memory(stored).add(keyed(messages, idem_key), batch_size=batch_size)
            finally:
                self.forget(stored)

    def delete_message(self, p: Principal, name: str, position: int) -> Any:
        """One message of a memory deleted (`Memory.delete_message`): the others keep their positions."""
        self.writable(p)
        stored = self.require(p, name)
        if self.kt.store.tree_info(stored).kind != "conversation":
            raise Problem(400, f"{name!r} is a document tree, not a conversation memory")
        with self.write_lock(stored):
            try:
                report = self.kt.memory(stored).delete_message(position)
            except NotFoundError:
                raise Problem(404, f"memory {name!r} has no message at position {position}") from None
            finally:
                self.forget(stored)
        report.memory = name
        return report

    def messages(self, p: Principal, name: str, start: int = 1, end: int | None = None) -> list[dict[str, object]]:
        t = self.view(p, name)
        if t.info.kind != "conversation":
            raise Problem(400, f"{name!r} is a document tree, not a conversation memory")
        return self.kt.memory(t.name).messages(start, end)

    # -- builds --------------------------------------------------------------------------------
    def allowed_path(self, p: Principal, raw: str) -> str:
        """A server-side path the configuration allows this caller (under one of its tenant's roots
        once resolved, `ServerConfig.read_roots`); the build job checks every file it reads again."""
        roots = self.config.read_roots(None if p.admin else p.tenant)
        if not roots.roots:
            raise Problem(403, "building from server-side paths is disabled (start with --allow-root DIR)")
        if any(ch in raw for ch in "*?["):
            raise Problem(400, f"{raw!r}: name files or directories, not glob patterns")
        if "\x00" in raw:  # no file has one; resolving it raises ValueError (a 500)
            raise Problem(400, f"{raw!r}: a path cannot hold a NUL character")
        try:
            path = roots.resolve(raw)
        except (OSError, RuntimeError) as exc:  # a symbolic link loop, an unknown ~user
            raise Problem(400, f"{raw!r}: cannot resolve this path ({exc})") from None
        if path is None:
            raise Problem(403, f"{raw!r} is outside the allowed roots")
        if not path.exists():
            raise Problem(404, f"no such file or directory: {raw!r}")
        try:
            roots.check(path)
        except InputError as exc:
            raise Problem(403, f"{raw!r} {exc.reason}") from None
        return str(path)

    def job_roots(self, job: Job) -> ReadRoots:
        """What a job may read: its uploaded files, or its tenant's roots (`ServerConfig.read_roots`)."""
        if job.params.get("uploads"):
            return ReadRoots.of([job.params["uploads"]])
        return self.config.read_roots(None if job.tenant == LOCAL else job.tenant)

    def submit_build(self, p: Principal, name: str, paths: list[str], *, add: bool = False,
                     meta: dict[str, str] | None = None, uploads: Path | None = None) -> Job:
        self.writable(p)
        stored = self.stored_name(p, name)
        if self.kt.store.tree_exists(stored) and self.kt.store.tree_info(stored).kind == "conversation":
            raise Problem(409, f"{name!r} is a conversation memory: add messages to it instead")
        params: dict[str, Any] = {"paths": paths, "add": add, "meta": meta or None}
        if uploads is not None:
            params["uploads"] = str(uploads)
        return self.jobs.create(p.tenant, "build", stored, params)

    def submit_enrich(self, p: Principal, name: str, options: dict[str, Any]) -> Job:
        """Queue `Tree.enrich` (`knowtree enrich`): the tree must exist now. Kept nodes make no call, so
        a job re-run after the server died resumes where it stopped."""
        self.writable(p)
        stored = self.require(p, name)
        return self.jobs.create(p.tenant, "enrich", stored, options)

    def submit_add(self, p: Principal, name: str, messages: list[dict[str, Any]], batch_size: int | None,
                   idem_key: str | None = None) -> Job:
        """Queue an add; the same `idem_key` again returns the job queued with it."""
        self.writable(p)
        stored = self.stored_name(p, name)
        if self.kt.store.tree_exists(stored) and self.kt.store.tree_info(stored).kind != "conversation":
            raise Problem(409, f"{name!r} is a document tree, not a conversation memory")
        keyed(messages)  # a bad record fails now, not in the background
        params = {"messages": messages, "batch_size": batch_size, "idem_key": idem_key}
        return self.jobs.create(p.tenant, "add", stored, params, idem_key=idem_key)

    def run_job(self, job: Job, report: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """The worker's runner: a build, a memory add or a knowledge base's build or add through the
        library, progress to the job row."""
        with inflate_limit(self.config.inflate_cap):  # compressed inputs inflate within the upload limit
            if job.kind in KB_JOBS:
                return self.kbs.run_job(job, report)
            with self.write_lock(job.tree):  # the embedding too: not during a delete or another save
                try:
                    result = self._run_job(job, report)
                finally:
                    self.forget(job.tree)
                return {**result, **self._embed_index(job)}

    def _embed_index(self, job: Job) -> dict[str, Any]:
        """Embed what the job changed in the tree's index now (`KnowTree.embed_index`), inside the job,
        so the first question after it does not pay for it. Not cancellable (the build is stored by
        now): no progress step. A failed embedding leaves the job's result as it is, with the reason;
        questions embed what they need on their own."""
        started = time.perf_counter()
        try:
            count = self.kt.embed_index(job.tree)
        except Exception as exc:  # the job's work is stored either way
            log.warning("embedding the index of %s after job %s failed: %s", job.tree, job.id, exc)
            return {"vectors_error": f"{type(exc).__name__}: {exc}"}
        return {"vectors": count, "vectors_s": round(time.perf_counter() - started, 2)}

    def _run_job(self, job: Job, report: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        uploads = job.params.get("uploads")
        if job.kind == "enrich":
            if not self.kt.store.tree_exists(job.tree):  # deleted since it was queued
                raise NotFoundError(f"no tree named {_shown_for(job)!r}: it was deleted")
            r = self.kt.tree(job.tree).enrich(
                leaves=job.params.get("leaves"),
                root=bool(job.params.get("root", True)),
                force=bool(job.params.get("force")),
                progress=lambda stage, done, total: report({"stage": stage, "done": done, "total": total}),
            )
            return {**_plain(r), "tree": _shown_for(job)}
        if job.kind == "add":
            r = self.kt.memory(job.tree).add(  # keyed: a job run again skips the batches saved
                keyed(job.params["messages"], job.params.get("idem_key"), job.id),
                batch_size=job.params.get("batch_size"),
                progress=lambda done, total: report({"stage": "messages", "done": done, "total": total}),
            )
            return {**_plain(r), "memory": _shown_for(job)}
        result = self.kt.build(
            job.params["paths"],
            tree=job.tree,
            add=bool(job.params.get("add")),
            meta=job.params.get("meta") or None,
            progress=lambda stage, done, total: report({"stage": stage, "done": done, "total": total}),
            # uploads are named by their file names, not by where the server keeps them
            rename=(lambda path: Path(path).name) if uploads else None,
            within=self.job_roots(job),
        )
        return {**_plain(result), "tree": _shown_for(job)}

    def job(self, p: Principal, job_id: str) -> Job:
        job = self.jobs.get(job_id) if re.fullmatch(r"[0-9a-f]{1,32}", job_id) else None
        if job is None or (not p.admin and job.tenant != p.tenant):
            raise Problem(404, f"no job {job_id!r}")
        return job

    def list_jobs(self, p: Principal, limit: int = 50) -> list[Job]:
        return self.jobs.list(None if p.admin else p.tenant, limit)

    def cancel_job(self, p: Principal, job_id: str) -> Job:
        self.writable(p)
        self.job(p, job_id)
        job = self.jobs.request_cancel(job_id)
        assert job is not None
        if job.state == "cancelled":  # it was queued: no worker will end it
            self.job_ended(job)
        return job

    def shown_job_tree(self, p: Principal, job: Job) -> str:
        return p.shown(job.tree) or job.tree

    # -- ledger --------------------------------------------------------------------------------
    def ledger(self, p: Principal, tree: str | None, limit: int) -> list[dict[str, Any]]:
        """The caller's runs: a tenant's are selected by the runs' owner column (never by a label's
        prefix) and shown under the names the tenant knows (`kb:NAME` for a knowledge base's)."""
        label = self.stored_name(p, tree) if tree is not None else None
        if p.admin:
            return self.kt.store.runs(label, limit)
        runs = self.kt.store.runs(label, limit, owner=p.tenant)
        for r in runs:
            r["tree"] = run_label(str(r["space"]), p.shown(str(r["subject"])))
        return runs


def _shown_for(job: Job) -> str:
    return job.tree.split(":", 1)[1] if job.tenant != "local" and ":" in job.tree else job.tree


def _plain(report: Any) -> dict[str, Any]:
    data = dict(report.__dict__)
    data["usage"] = report.usage.model_dump()
    return data


def title_of(n: Node) -> str:
    """A short label: the section title, else a leaf's file and lines, else the summary's first words."""
    if n.meta.title:
        return n.meta.title
    if n.is_leaf and n.spans and not n.meta.time_range:
        s = n.spans[0]
        return f"{Path(s.file).name}:{s.line_start}-{s.line_end}"
    words = n.meta.summary.split()
    if words:
        return " ".join(words[:10]) + (" …" if len(words) > 10 else "")
    return n.kind.value


def brief(n: Node) -> NodeBrief:
    title = title_of(n)
    return NodeBrief(
        id=n.id, kind=n.kind.value, level=n.level, title=title, summary=n.meta.summary,
        children=len(n.children), spans=n.spans,
    )
