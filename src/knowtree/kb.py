"""Knowledge bases (AutoKB) from Python: `kt.kb("tv").build(...)`, `.add(...)`, `.ask(...)`,
`.show()`, `.export()`.

    kt = knowtree.open("kb.db")
    report = kt.kb("tv").build(issues="tickets.jsonl", docs=["manual.pdf"],
                               attributes="tv_attributes.toml", rules="tv_rules.toml")
    answer = kt.kb("tv").ask("my remote stopped pairing")
    answer.issue.title, answer.match, answer.solution["text"], answer.solution["citations"]

Inputs may be file paths (read and checked before anything is stored) or already-loaded objects.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowtree.answer.kb import PASSAGES, KBAnswer, hybrid_retrieve, query_metadata, query_passages
from knowtree.answer.kb_rerank import rerank as rerank_top
from knowtree.construct.kb.builder import (
    KBContext,
    KBOptions,
    KBReport,
    Progress,
    build,
    solve_one,
)
from knowtree.construct.kb.incremental import add_docs, add_issues
from knowtree.errors import UserError
from knowtree.ingest.kb_inputs import (
    AttributeConfig,
    DocSection,
    RawIssue,
    Rule,
    load_attributes,
    load_kb_docs,
    load_raw_issues,
    load_rules,
)
from knowtree.retrieve.kbindex import KBIndexes
from knowtree.store import kb as kbstore
from knowtree.store.dialect import is_url

if TYPE_CHECKING:
    from knowtree.construct.calls import Calls
    from knowtree.host import Host
    from knowtree.llm.client import LLMClient
    from knowtree.store.protocol import SQLStore


class StoredRows:
    """The KB builder's reads and writes (`construct.kb.builder.KBRows`), on this KB's store rows."""

    def __init__(self, store: SQLStore, name: str) -> None:
        self.store, self.name = store, name

    def save_parts(self, **parts: Any) -> None:
        kbstore.save_parts(self.store, self.name, **parts)

    def save_solution(
        self, issue_id: str, solution: Any, status: str, compliance: list[dict[str, Any]]
    ) -> None:
        kbstore.save_solution(self.store, self.name, issue_id, solution, status, compliance)

    def mark_stale(self, issue_ids: Sequence[str]) -> None:
        kbstore.mark_stale(self.store, self.name, issue_ids)

    def load_raw(self) -> list[kbstore.KBRaw]:
        return kbstore.load_raw(self.store, self.name)

    def load_themes(self) -> list[kbstore.KBTheme]:
        return kbstore.load_themes(self.store, self.name)

    def load_issues(self) -> list[kbstore.KBIssue]:
        return kbstore.load_issues(self.store, self.name)

    def load_chunks(self) -> list[kbstore.KBChunk]:
        return kbstore.load_chunks(self.store, self.name)

    def load_clusters(self) -> list[kbstore.KBCluster]:
        return kbstore.load_clusters(self.store, self.name)


def _issues(value: str | Path | Sequence[RawIssue]) -> list[RawIssue]:
    return load_raw_issues(value) if isinstance(value, str | Path) else list(value)


def _docs(value: str | Path | Sequence[str] | Sequence[DocSection]) -> list[DocSection]:
    if isinstance(value, str | Path):
        return load_kb_docs([str(value)])
    items = list(value)
    if items and all(isinstance(v, DocSection) for v in items):
        return items  # type: ignore[return-value]
    return load_kb_docs([str(v) for v in items])


class KB:
    """One named knowledge base in a knowtree database."""

    def __init__(self, kt: Host, name: str, *, embedder: str | None = None) -> None:
        if not name.strip():
            raise UserError("a knowledge base needs a name")
        self.kt = kt
        self.name = name
        self._embedder = embedder
        self._indexes: KBIndexes | None = None

    # -- plumbing ------------------------------------------------------------------------------
    def indexes(self, embedder: str | None = None) -> KBIndexes:
        if self._indexes is None:
            store = self.kt.store
            # the passage indexes live in the KB's database: its file, or the PostgreSQL store itself
            where = store if is_url(store.path) else store.path
            self._indexes = KBIndexes(where, self.name, embedder or self._embedder)
        return self._indexes

    def _context(self, client: LLMClient, progress: Progress | None, calls: Calls | None = None) -> KBContext:
        record = kbstore.kb_record(self.kt.store, self.name)
        return KBContext(
            rows=StoredRows(self.kt.store, self.name),
            name=self.name,
            client=client,
            indexes=self.indexes(record.settings.get("embedder")),
            config=AttributeConfig.from_dict(record.attributes),
            rules=[Rule(**r) for r in record.rules],
            options=KBOptions.from_dict(record.settings),
            progress=progress,
            calls=calls,
        )

    def _run(self, kind: str, detail: str, fn: Any, progress: Progress | None, on_client: Any) -> Any:
        with self.kt.run(kind, self.name, detail, space="kb") as run:
            assert run.client is not None
            if on_client:
                on_client(run.client)
            from knowtree.distributed import fanout_for

            # with executor ray: the stages' independent calls as Ray tasks; clustering, the KB's
            # rows and its indexes stay here
            with fanout_for(run.client, self.kt.settings) as fanout:
                return fn(self._context(run.client, progress, fanout))

    def rules(self) -> list[Rule]:
        """The domain rules the KB's solutions are written and checked under."""
        return [Rule(**r) for r in kbstore.kb_record(self.kt.store, self.name).rules]

    def set_rules(self, rules: str | Path | Sequence[Rule]) -> int:
        """Replace the KB's domain rules (a rules file or `Rule`s, checked before anything changes).
        Stored solutions are kept, marked `stale`: each is regenerated and checked under the new
        rules the next time it is retrieved. Returns how many were marked."""
        rule_list = load_rules(rules) if isinstance(rules, str | Path) else list(rules)
        return kbstore.set_rules(self.kt.store, self.name, [r.__dict__ for r in rule_list])

    # -- build and grow ------------------------------------------------------------------------
    def build(
        self,
        *,
        issues: str | Path | Sequence[RawIssue],
        docs: str | Path | Sequence[str] | Sequence[DocSection],
        attributes: str | Path | AttributeConfig,
        rules: str | Path | Sequence[Rule],
        solutions: str = "lazy",
        replace: bool = False,
        progress: Progress | None = None,
        on_client: Any = None,
        **options: Any,
    ) -> KBReport:
        """Build the KB. Every input is read and checked before anything is stored; an existing KB
        of that name is kept unless `replace=True`."""
        if solutions not in ("eager", "lazy"):
            raise UserError(f"solutions must be eager or lazy, not {solutions!r}")
        raw = _issues(issues)
        sections = _docs(docs)
        config = load_attributes(attributes) if isinstance(attributes, str | Path) else attributes
        rule_list = load_rules(rules) if isinstance(rules, str | Path) else list(rules)
        opts = KBOptions.from_dict({**options, "solutions": solutions})
        if opts.context not in ("path", "model"):
            raise UserError(f"context must be path or model, not {opts.context!r}")
        if opts.theme_assign not in ("similarity", "model"):
            raise UserError(f"theme assignment must be similarity or model, not {opts.theme_assign!r}")
        settings = {**opts.to_dict(), "embedder": self._embedder}
        self.kt.model  # noqa: B018 - a bad model string fails before anything is stored
        kbstore.create_kb(
            self.kt.store,
            kbstore.KBRecord(
                self.name,
                config.domain,
                config.to_dict(),
                [r.__dict__ for r in rule_list],
                settings,
                self.kt.model.id,
            ),
            replace=replace,
        )
        try:
            return self._run(
                "kb-build", f"{len(raw)} issues", lambda ctx: build(ctx, raw, sections), progress, on_client
            )
        except BaseException:
            if not replace:  # a half-built new KB is not worth keeping; rerunning repeats no finished call
                kbstore.delete_kb(self.kt.store, self.name)
            raise

    def add(
        self,
        *,
        issues: str | Path | Sequence[RawIssue] | None = None,
        docs: str | Path | Sequence[str] | Sequence[DocSection] | None = None,
        progress: Progress | None = None,
        on_client: Any = None,
    ) -> KBReport:
        """New raw issues join existing clusters or open new ones; new documents re-ground only the
        solutions whose retrieved passages they change."""
        if issues is None and docs is None:
            raise UserError("nothing to add: give issues and/or docs")
        raw = _issues(issues) if issues is not None else []
        sections = _docs(docs) if docs is not None else []
        kbstore.kb_record(self.kt.store, self.name)  # fails clearly when the KB does not exist

        def go(ctx: KBContext) -> KBReport:
            report = add_docs(ctx, sections) if sections else None
            if raw:
                issue_report = add_issues(ctx, raw)
                if report is not None:
                    issue_report.restale, issue_report.chunks = report.restale, report.chunks
                report = issue_report
            assert report is not None
            return report

        return self._run("kb-add", f"{len(raw)} issues, {len(sections)} sections", go, progress, on_client)

    # -- ask -------------------------------------------------------------------------------------
    def ask(
        self,
        query: str,
        *,
        k: int = 5,
        metadata: str = "auto",
        solve: bool = True,
        rerank: bool = False,
        passages: int = PASSAGES,
    ) -> KBAnswer:
        """Algorithm 2; the accepted issue's solution is generated (lazy KBs) and stored on first use.
        `metadata`: how the query's attribute values are read: model (one call) | keywords (the
        attribute configuration's keywords, no call) | none (semantic only) | auto (keywords where
        the configuration gives keywords, else the model): the model's reading never raised
        HitRate@1 over the keywords (TV, 58 dev queries: 0.414 vs 0.500; medical, 112: 0.830 both;
        benchmarks/RESULTS.md "Query metadata: the model or the keywords") and costs a call.
        `passages`: how many document passages for the query itself come with the answer (no model
        call; 0: none).
        `rerank`: the model grades the top issues yes/no and they are reordered
        (`answer/kb_rerank.py`; one call; off by default: with the embedded 1.5B model it lowered TV
        HitRate@1, benchmarks/RESULTS.md "AutoKB rerank")."""
        if metadata not in ("auto", "model", "keywords", "none"):
            raise UserError(f"metadata must be auto, model, keywords or none, not {metadata!r}")
        if not query.strip():
            raise UserError("the query is empty")
        record = kbstore.kb_record(self.kt.store, self.name)
        config = AttributeConfig.from_dict(record.attributes)
        if metadata == "auto":
            metadata = "keywords" if any(a.keywords for a in config.attributes) else "model"
        issues = {i.id: i for i in kbstore.load_issues(self.kt.store, self.name)}
        started = time.monotonic()
        trace: list[dict[str, Any]] = []
        with ExitStack() as stack:
            run = (  # no run recorded for a question that calls no model
                stack.enter_context(self.kt.run("kb-ask", self.name, query, space="kb"))
                if metadata == "model" or solve or rerank
                else None
            )
            client = run.client if run is not None else None
            if metadata == "none":
                qmeta = {a: "any" for a in config.names()}
                trace.append({"step": "metadata", "how": "none", "metadata": qmeta})
            else:
                qmeta = query_metadata(query, config, client if metadata == "model" else None, trace)
            indexes = self.indexes(record.settings.get("embedder"))
            accepted = hybrid_retrieve(query, qmeta, issues, indexes, k=k, trace=trace)
            if rerank and client is not None and len(accepted) > 1:
                texts = self._issue_texts(issues)
                accepted = rerank_top(
                    client, query, accepted, texts, domain=config.domain or "general", trace=trace
                )
            answer = KBAnswer(
                query=query, query_metadata=qmeta, issue=None, match="none", accepted=accepted, trace=trace
            )
            answer.passages = query_passages(
                indexes, lambda ids: kbstore.load_chunks(self.kt.store, self.name, ids), query, passages
            )
            if accepted:
                best = accepted[0]
                answer.issue, answer.match = best.issue, best.match
                answer.members = [
                    r.id
                    for r in kbstore.load_raw(self.kt.store, self.name)
                    if r.cluster_id == best.issue.cluster_id
                ]
                issue = best.issue
                if solve and (issue.solution is None or issue.status == "stale") and client is not None:
                    ctx = self._context(client, None)
                    chunks = {c.id: c for c in kbstore.load_chunks(self.kt.store, self.name)}
                    issue = solve_one(ctx, issue, chunks)
                    trace.append({"step": "solution", "how": "generated now (lazy)", "status": issue.status})
                answer.solution, answer.status = issue.solution, issue.status
                answer.violations = kept_violations(issue.compliance)
            trace.append({"step": "done", "seconds": round(time.monotonic() - started, 3)})
            if run is not None:
                run.status = answer.match
        return answer

    def _issue_texts(self, issues: dict[str, kbstore.KBIssue]) -> dict[str, list[str]]:
        """Issue id → [title, member texts...] (a parent's cluster, a child's own raw issues)."""
        by_cluster: dict[str, list[str]] = {}
        by_issue: dict[str, list[str]] = {}
        for r in kbstore.load_raw(self.kt.store, self.name):
            by_cluster.setdefault(r.cluster_id or "", []).append(r.text)
            if r.issue_id:
                by_issue.setdefault(r.issue_id, []).append(r.text)
        out = {}
        for i in issues.values():
            members = by_cluster.get(i.cluster_id, []) if i.kind == "parent" else by_issue.get(i.id, [])
            out[i.id] = [i.title, *members]
        return out

    # -- read ------------------------------------------------------------------------------------
    def show(self) -> dict[str, Any]:
        """Themes → parent issues → child issues, with metadata, solution status and compliance."""
        store = self.kt.store
        record = kbstore.kb_record(store, self.name)
        raw = kbstore.load_raw(store, self.name)
        absorbed: dict[str, int] = {}
        size: dict[str, int] = {}
        for r in raw:
            absorbed[r.issue_id or ""] = absorbed.get(r.issue_id or "", 0) + 1
            size[r.cluster_id or ""] = size.get(r.cluster_id or "", 0) + 1
        clusters = {c.id: c for c in kbstore.load_clusters(store, self.name)}
        issues = kbstore.load_issues(store, self.name)
        kids: dict[str, list[kbstore.KBIssue]] = {}
        for i in issues:
            if i.parent:
                kids.setdefault(i.parent, []).append(i)

        def node(i: kbstore.KBIssue) -> dict[str, Any]:
            violations = kept_violations(i.compliance)
            return {
                "id": i.id,
                "title": i.title,
                "metadata": i.metadata,
                "status": i.status,
                "solution": (i.solution or {}).get("text"),
                "citations": len((i.solution or {}).get("citations", [])),
                "violations": violations,
                "raw_issues": absorbed.get(i.id, 0),
            }

        themes = []
        for t in kbstore.load_themes(store, self.name):
            parents = [
                i
                for i in issues
                if i.kind == "parent"
                and clusters.get(i.cluster_id)
                and clusters[i.cluster_id].theme_id == t.id
            ]
            themes.append(
                {
                    "id": t.id,
                    "name": t.name,
                    "parents": [
                        {
                            **node(p),
                            "cluster_size": size.get(p.cluster_id, 0),
                            "children": [node(c) for c in kids.get(p.id, [])],
                        }
                        for p in parents
                    ],
                }
            )
        return {
            "name": self.name,
            "domain": record.domain,
            "model": record.model,
            "raw_issues": len(raw),
            "chunks": len(kbstore.load_chunks(store, self.name)),
            "themes": themes,
        }

    def export(self) -> list[dict[str, Any]]:
        """One record per KB issue: id, kind, parent, theme, title, metadata, members (raw issue ids),
        solution, citations, status, compliance. A parent's members are its whole cluster; a child's
        the raw issues linked to it plus the parent's own (those that name no value of a sibling)."""
        store = self.kt.store
        raw = kbstore.load_raw(store, self.name)
        theme_of = {c.id: c.theme_id for c in kbstore.load_clusters(store, self.name)}
        names = {t.id: t.name for t in kbstore.load_themes(store, self.name)}
        out = []
        for i in kbstore.load_issues(store, self.name):
            if i.kind == "parent":
                members = [r.id for r in raw if r.cluster_id == i.cluster_id]
            else:  # its own raw issues, and the parent's unspecific ones (not those of a sibling)
                members = [r.id for r in raw if r.issue_id in (i.id, i.parent)]
            out.append(
                {
                    "id": i.id,
                    "kind": i.kind,
                    "parent": i.parent,
                    "theme": names.get(theme_of.get(i.cluster_id) or "", ""),
                    "title": i.title,
                    "metadata": i.metadata,
                    "members": members,
                    "solution": (i.solution or {}).get("text"),
                    "citations": (i.solution or {}).get("citations", []),
                    "status": i.status,
                    "compliance": i.compliance,
                }
            )
        return out

    def delete(self) -> None:
        kbstore.delete_kb(self.kt.store, self.name)
        idx = self.indexes()
        idx.reset("issues")
        idx.reset("chunks")


def kept_violations(compliance: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The rules the kept solution still breaks (why it is "flagged"): the violations of the attempt
    marked kept; in reports stored before attempts were marked, of the last one."""
    kept = next((c for c in reversed(compliance or []) if c.get("kept", True)), None)
    return list(kept["violations"]) if kept else []
