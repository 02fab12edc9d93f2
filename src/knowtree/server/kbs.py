"""Knowledge bases per caller: the `/v1/kbs` routes and the `kb_ask` MCP tool call these methods,
which call `knowtree.kb.KB` (build, add, ask, show, export, delete) — the same calls `knowtree kb` makes.

A tenant's knowledge base `NAME` is stored as `TENANT:NAME`, as trees are (`tenancy.Principal`); one
that is not the caller's is reported exactly like one that does not exist. Builds and adds are
background jobs (kinds `kb-build`, `kb-add`) run by the server's job worker, reading server-side
files under the caller's allowed roots, or uploaded files.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from knowtree.answer.kb import PASSAGES
from knowtree.errors import InputError, NotFoundError
from knowtree.ingest.kb_inputs import load_attributes, load_kb_docs, load_raw_issues, load_rules
from knowtree.ingest.limits import inflate_limit
from knowtree.server.config import ServerConfig
from knowtree.server.jobs import Job, JobStore
from knowtree.server.models_kb import KBAddRequest, KBBuildRequest, KBSummary
from knowtree.server.problems import Problem
from knowtree.server.tenancy import Principal
from knowtree.store import kb as kbstore

if TYPE_CHECKING:
    from knowtree.core import KnowTree
    from knowtree.ingest.roots import ReadRoots
    from knowtree.kb import KB

KB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ADMIN_KB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
KINDS = ("kb-build", "kb-add")


class Core(Protocol):
    """What the knowledge-base service uses of `service.Service`."""

    kt: KnowTree
    jobs: JobStore
    config: ServerConfig

    def write_lock(self, stored: str, space: str = "tree") -> threading.Lock: ...

    def allowed_path(self, p: Principal, raw: str) -> str: ...

    def writable(self, p: Principal) -> None: ...

    def job_roots(self, job: Job) -> ReadRoots: ...


class KBService:
    def __init__(self, core: Core) -> None:
        self.core = core

    @property
    def store(self) -> Any:
        return self.core.kt.store

    # -- names and ownership -------------------------------------------------------------------
    def stored_name(self, p: Principal, name: str) -> str:
        if not (ADMIN_KB_NAME if p.admin else KB_NAME).match(name):
            raise Problem(400, f"knowledge base name {name!r}: use letters, digits, '.', '_' or '-' (at most 64)")
        return p.stored(name)

    def exists(self, stored: str) -> bool:
        try:
            kbstore.kb_record(self.store, stored)
        except NotFoundError:
            return False
        return True

    def require(self, p: Principal, name: str) -> str:
        stored = self.stored_name(p, name)
        if not self.exists(stored):
            raise Problem(404, f"no knowledge base named {name!r}")
        return stored

    def kb(self, stored: str) -> KB:
        """The KB with the embedder it was built with."""
        record = kbstore.kb_record(self.store, stored)
        return self.core.kt.kb(stored, embedder=record.settings.get("embedder"))

    # -- reads ---------------------------------------------------------------------------------
    def list(self, p: Principal) -> list[KBSummary]:
        out = []
        for stored in kbstore.kb_names(self.store):
            shown = p.shown(stored)
            if shown is not None:
                r = kbstore.kb_record(self.store, stored)
                out.append(KBSummary(name=shown, domain=r.domain, model=r.model, created=r.created, updated=r.updated))
        return out

    def show(self, p: Principal, name: str) -> dict[str, Any]:
        data = self.kb(self.require(p, name)).show()
        data["name"] = name
        return data

    def ask(self, p: Principal, name: str, query: str, *, k: int = 5, metadata: str = "auto",
            solve: bool = True, passages: int = PASSAGES) -> dict[str, Any]:
        """`KB.ask` as `knowtree kb ask --json` prints it. A lazy solution written now is stored (like
        a question's ledger entry, allowed to read-only keys: it is what any later ask would write).
        Not serialised with the KB's writers: two asks writing the same lazy solution write the same
        (cached) one."""
        stored = self.require(p, name)
        return self.kb(stored).ask(query, k=k, metadata=metadata, solve=solve, passages=passages).to_dict()

    def export(self, p: Principal, name: str) -> list[dict[str, Any]]:
        return self.kb(self.require(p, name)).export()

    @contextlib.contextmanager
    def _reading(self, uploaded: bool) -> Iterator[None]:
        """Checking input files: compressed ones inflate within the server's cap, and an uploaded
        file's error names it as it was uploaded, not where the server keeps it."""
        try:
            with inflate_limit(self.core.config.inflate_cap):
                yield
        except InputError as exc:
            if not uploaded:
                raise
            raise InputError(Path(exc.path).name, exc.reason) from None

    # -- writes --------------------------------------------------------------------------------
    def delete(self, p: Principal, name: str) -> None:
        self.core.writable(p)
        stored = self.require(p, name)
        with self.core.write_lock(stored, "kb"):
            self.kb(stored).delete()

    def set_rules(self, p: Principal, name: str, rules_file: str, *, uploaded: bool = False) -> dict[str, Any]:
        """`knowtree kb rules`: the file is read and checked (422 naming it) before anything changes;
        a server-side path must be under the caller's roots (an upload is the server's own)."""
        self.core.writable(p)
        stored = self.require(p, name)
        path = rules_file if uploaded else self.core.allowed_path(p, rules_file)
        with self._reading(uploaded):
            rules = load_rules(path)
        with self.core.write_lock(stored, "kb"):
            stale = self.kb(stored).set_rules(rules)
        return {"kb": name, "rules": len(rules), "stale": stale}

    def submit_build(self, p: Principal, name: str, body: KBBuildRequest, *, uploads: Path | None = None) -> Job:
        """Queue a build; server-side paths must be under the caller's roots (uploads are not)."""
        self.core.writable(p)
        stored = self.stored_name(p, name)
        if self.exists(stored) and not body.replace:
            raise Problem(409, f"a knowledge base named {name!r} exists: add to it, or build with replace=true")
        params = body.model_dump()
        if uploads is None:
            for key in ("issues", "attributes", "rules"):
                params[key] = self.core.allowed_path(p, params[key])
            params["docs"] = [self.core.allowed_path(p, d) for d in params["docs"]]
            params.update(self.core.admitted_roots(p))
        else:
            params["uploads"] = str(uploads)
        with self._reading(uploads is not None):  # a bad file fails now (422 naming the line)
            load_raw_issues(params["issues"])
            load_attributes(params["attributes"])
            load_rules(params["rules"])
        return self.core.jobs.create(p.tenant, "kb-build", stored, params)

    def submit_add(self, p: Principal, name: str, body: KBAddRequest, *, uploads: Path | None = None) -> Job:
        self.core.writable(p)
        stored = self.require(p, name)
        if not body.issues and not body.docs:
            raise Problem(400, "nothing to add: give issues and/or docs")
        params = body.model_dump()
        if uploads is None:
            if params["issues"]:
                params["issues"] = self.core.allowed_path(p, params["issues"])
            params["docs"] = [self.core.allowed_path(p, d) for d in params["docs"] or []]
            params.update(self.core.admitted_roots(p))
        else:
            params["uploads"] = str(uploads)
        if params["issues"]:
            with self._reading(uploads is not None):
                load_raw_issues(params["issues"])
        return self.core.jobs.create(p.tenant, "kb-add", stored, params)

    def run_job(self, job: Job, report: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """The worker's runner for `kb-build` / `kb-add` jobs. A build re-run after the server died
        replaces what the dead run left (its finished model calls come from the cache). Every input
        file is read here, each checked against what the job may read (`Service.job_roots`), the
        files of a documents folder too."""
        params = job.params
        within = self.core.job_roots(job)

        def checked(path: str) -> str:
            within.check(path)
            return path

        def progress(stage: str, done: int, total: int) -> None:
            report({"stage": stage, "done": done, "total": total})

        docs: Any = load_kb_docs(params["docs"], within) if params.get("docs") else None
        if docs and params.get("uploads"):  # uploaded documents are cited by the names they were uploaded as
            docs = [replace(d, source=Path(d.source).name) for d in docs]
        with self.core.write_lock(job.tree, "kb"):
            if job.kind == "kb-build":
                options: dict[str, Any] = {"context": params.get("context") or "path"}
                if params.get("threshold") is not None:
                    options["threshold"] = params["threshold"]
                result = self.core.kt.kb(job.tree, embedder=params.get("embedder")).build(
                    issues=load_raw_issues(checked(params["issues"])), docs=docs,
                    attributes=load_attributes(checked(params["attributes"])),
                    rules=load_rules(checked(params["rules"])), solutions=params.get("solutions") or "lazy",
                    replace=bool(params.get("replace")) or job.attempts > 1, progress=progress, **options,
                )
            else:
                if not self.exists(job.tree):  # deleted since: said without the store's list of every KB
                    raise NotFoundError(f"no knowledge base named {_shown(job)!r}: it was deleted")
                result = self.kb(job.tree).add(
                    issues=load_raw_issues(checked(params["issues"])) if params.get("issues") else None,
                    docs=docs, progress=progress,
                )
        data = dict(result.__dict__)
        data["usage"] = result.usage.model_dump()
        data["kb"] = _shown(job)
        return data


def _shown(job: Job) -> str:
    return job.tree.split(":", 1)[1] if job.tenant != "local" and ":" in job.tree else job.tree
