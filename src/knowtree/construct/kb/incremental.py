"""Incremental adds to a built knowledge base: new raw issues join clusters or open new ones
(`add_issues`), new documents re-ground only the solutions they change (`add_docs`). The steps are the
build's (`builder`), on what is stored already."""

from __future__ import annotations

import time
from collections.abc import Sequence

from knowtree.construct.kb import cluster, solutions, subtrees
from knowtree.construct.kb.builder import (
    KBContext,
    KBReport,
    expand,
    features,
    index_docs,
    issue_passages,
    make_clusters,
    make_seeds,
    member_texts,
    solve_all,
    theme_clusters,
)
from knowtree.ingest.kb_inputs import DocSection, RawIssue
from knowtree.records import KBCluster, KBIssue, KBRaw
from knowtree.types import Usage


def add_issues(ctx: KBContext, new: Sequence[RawIssue]) -> KBReport:
    """New raw issues join the most similar existing cluster (average similarity ≥ join_threshold) or
    form new clusters, which get themes (the existing ones), subtrees and index entries. Nothing
    already built is rebuilt: joined clusters only get their index entries refreshed."""
    started = time.monotonic()
    old = ctx.rows.load_raw()
    known = {r.id for r in old}
    fresh = [r for r in new if r.id not in known]
    all_raw = [RawIssue(r.id, r.text, r.timestamp) for r in old] + list(fresh)
    report = KBReport(ctx.name, len(fresh), 0, 0, 0, 0, 0, 0, Usage(), 0.0, skipped=len(new) - len(fresh))
    if not fresh:
        report.seconds = time.monotonic() - started
        return report
    issues = ctx.rows.load_issues()
    by_cluster: dict[str, list[int]] = {}
    for i, r in enumerate(old):
        by_cluster.setdefault(r.cluster_id or "", []).append(i)
    dense, sim = features(ctx, [r.text for r in all_raw])
    first_new = len(old)
    joined: dict[int, str] = {}
    if by_cluster:
        ids = list(by_cluster)
        for i in range(first_new, len(all_raw)):
            scores = [float(sim[i, by_cluster[c]].mean()) for c in ids]
            best = max(range(len(ids)), key=lambda j: scores[j])
            if scores[best] >= ctx.options.join_threshold:
                joined[i] = ids[best]
    rows: list[KBRaw] = []
    parents = {i.cluster_id: i for i in issues if i.kind == "parent"}
    children: dict[str, list[KBIssue]] = {}
    for i in issues:
        if i.kind == "child":
            children.setdefault(i.cluster_id, []).append(i)
    for i, cid in joined.items():
        r = all_raw[i]
        target = subtrees.link_one(ctx.config, r.text, parents[cid], children.get(cid, []))
        rows.append(KBRaw(r.id, r.text, r.timestamp, cid, target))
    rest = [i for i in range(first_new, len(all_raw)) if i not in joined]
    new_issues: list[KBIssue] = []
    new_clusters: list[KBCluster] = []
    if rest:
        sub = sim[rest][:, rest]
        groups = [
            [rest[j] for j in g]
            for g in cluster.agglomerate(sub, ctx.options.threshold, max_size=ctx.options.max_cluster)
        ]
        seeds = make_seeds(ctx.name, all_raw, sim, groups)
        existing = ctx.rows.load_themes()
        stored = {c.id: c.theme_id for c in ctx.rows.load_clusters()}
        themed = [(rows_of, stored[c]) for c, rows_of in by_cluster.items() if stored.get(c)]
        _, theme_ids = theme_clusters(ctx, seeds, groups, sim, dense, existing, themed)
        new_issues, links = expand(ctx, seeds)
        new_clusters = make_clusters(seeds, theme_ids, groups, dense)
        for s in seeds:
            for rid, text in zip(s.raw_ids, s.texts, strict=True):
                rows.append(
                    KBRaw(
                        rid, text, next(r.timestamp for r in fresh if r.id == rid), s.cluster_id, links[rid]
                    )
                )
    ctx.rows.save_parts(raw=rows, clusters=new_clusters, issues=new_issues)
    # refresh index entries of touched clusters (their member text grew) and index the new issues
    members = member_texts(ctx.rows.load_raw())
    touched = set(joined.values()) | {c.id for c in new_clusters}
    affected = [i for i in [*issues, *new_issues] if i.cluster_id in touched]
    ctx.indexes.add("issues", issue_passages(affected, members, ctx.indexes.ground))
    if ctx.options.solutions == "eager" and new_issues:
        solve_all(ctx, new_issues, {c.id: c for c in ctx.rows.load_chunks()})
    n_parents = sum(i.kind == "parent" for i in new_issues)
    report.clusters, report.parents, report.children = (
        len(new_clusters),
        n_parents,
        len(new_issues) - n_parents,
    )
    report.joined = len(joined)
    report.usage = ctx.client.usage.model_copy()
    report.seconds = time.monotonic() - started
    return report


def add_docs(ctx: KBContext, sections: Sequence[DocSection]) -> KBReport:
    """Index new documents; only solutions whose retrieved passages now include a new chunk are
    re-grounded (eager) or marked stale (lazy: regenerated at their next ask)."""
    started = time.monotonic()
    new_chunks = index_docs(ctx, sections)
    new_ids = {c.id for c in new_chunks}
    regrounded = reground(ctx)
    chunks = {c.id: c for c in ctx.rows.load_chunks()}
    affected = []
    for issue in ctx.rows.load_issues():
        if issue.solution is None:
            continue
        passages = solutions.retrieve_chunks(ctx.indexes, chunks, issue)
        if any(p.id in new_ids for p in passages):
            affected.append(issue)
    if ctx.options.solutions == "eager":
        solve_all(ctx, affected, chunks)
    else:
        ctx.rows.mark_stale([i.id for i in affected])
    return KBReport(
        ctx.name,
        0,
        0,
        0,
        0,
        0,
        0,
        len(new_chunks),
        ctx.client.usage.model_copy(),
        time.monotonic() - started,
        restale=len(affected),
        notes=[f"{regrounded} issues re-grounded in the new chunks"] if regrounded else [],
    )


def reground(ctx: KBContext) -> int:
    """Re-index the title passage of every issue whose grounding the new chunks change (member
    passages are unchanged); returns how many."""
    lexical = ctx.indexes.lexical("issues")
    fresh = [
        p
        for p in issue_passages(ctx.rows.load_issues(), member_texts(ctx.rows.load_raw()), ctx.indexes.ground)
        if "|" not in p.id
    ]
    changed = [p for p in fresh if (old := lexical.get(p.id)) is None or old.meta != p.meta]
    if changed:
        ctx.indexes.add("issues", changed)
    return len(changed)
