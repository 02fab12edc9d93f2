"""Knowledge-base construction (the seed's Algorithm 1); incremental adds are in `incremental`.

    docs → contextualized chunks → hybrid index                          (no model by default)
    raw issues → embeddings + TF-IDF + grounding → clusters (numpy)      (no model)
    cluster representatives → themes (1 call) → theme per cluster        (1 call per 20 clusters)
    seed issues → parent + child issues with metadata                    (1 call per 6 clusters)
    issue nodes → solutions + compliance                                 (eager; lazy: at first ask)

Model calls grow with the number of clusters, never with the raw issues; every raw issue keeps the
id of the KB issue that absorbed it. A stage's calls that are independent of each other (a document's
chunk contexts, a batch of themes or subtrees, an issue's solution) go through `KBContext.calls`: here,
one after another, or as Ray tasks (`knowtree.distributed.RayFanout`); the features, the clustering,
the theme names, the indexes and every write stay in this process.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Protocol

from knowtree.construct.calls import Calls, Here
from knowtree.construct.kb import chunks as chunking
from knowtree.construct.kb import cluster, compliance, solutions, subtrees, themes
from knowtree.ingest.kb_inputs import AttributeConfig, DocSection, RawIssue, Rule
from knowtree.llm.client import LLMClient
from knowtree.records import KBChunk, KBCluster, KBIssue, KBRaw, KBTheme
from knowtree.retrieve import Passage
from knowtree.retrieve.kbindex import KBIndexes
from knowtree.types import Usage

if TYPE_CHECKING:
    import numpy as np

Progress = Callable[[str, int, int], None]


@dataclass
class KBOptions:
    solutions: Literal["eager", "lazy"] = "lazy"
    context: Literal["path", "model"] = "path"
    # average-linkage similarity at which clusters stop merging. Measured (benchmarks/RESULTS.md,
    # AutoKB): clusters stay ≥ 0.99 pure on the medical issues from 0.35 up, while on the TV questions
    # (about one raw issue per manual section) any looser merging mixes sections; 0.6 keeps both pure.
    threshold: float = 0.6
    join_threshold: float = 0.6  # `kb add`: a new issue joins the best cluster at or above this
    # dense (mean-centred), TF-IDF, grounding. Grounding (one hybrid search per raw issue over the
    # chunks) cost 10 min on MedQuAD's 23k chunks and did not make purer clusters: off by default.
    weights: tuple[float, float, float] = (0.3, 0.7, 0.0)
    min_expand: int = 2  # clusters smaller than this keep their own text as the issue (no model call)
    # How clusters get their theme (themes organise `kb show`; retrieval does not use them):
    # "similarity": the nearest theme name by the default embedder (no call); "model": the model
    # assigns clusters of >= theme_min raw issues (1 call per 20), a smaller one takes the theme of
    # its most similar themed cluster. Measured on the 960 medical issues (benchmarks/RESULTS.md,
    # "AutoKB build cost"): the embedded 1.5B model numbered its answers by position (a disease's
    # issues in its most common theme: 0.27, random 0.25), the similarity 0.59, and 30 fewer calls.
    theme_assign: Literal["similarity", "model"] = "similarity"
    theme_min: int = 2
    grounding_k: int = 3
    max_cluster: int = 60
    max_themes: int = 10
    subtree_batch: int = subtrees.BATCH

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KBOptions:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if "weights" in known:
            known["weights"] = tuple(known["weights"])
        return cls(**known)


class KBRows(Protocol):
    """What the builder reads of a KB and writes to it, row by row as it goes (a killed build keeps
    what it stored). The facade (`knowtree.kb`) binds it to the store; nothing here sees the store."""

    def save_parts(
        self,
        *,
        raw: Sequence[KBRaw] = (),
        themes: Sequence[KBTheme] = (),
        clusters: Sequence[KBCluster] = (),
        issues: Sequence[KBIssue] = (),
        chunks: Sequence[KBChunk] = (),
    ) -> None: ...

    def save_solution(
        self, issue_id: str, solution: dict[str, Any] | None, status: str, compliance: list[dict[str, Any]]
    ) -> None: ...

    def mark_stale(self, issue_ids: Sequence[str]) -> None: ...

    def load_raw(self) -> list[KBRaw]: ...

    def load_themes(self) -> list[KBTheme]: ...

    def load_issues(self) -> list[KBIssue]: ...

    def load_chunks(self) -> list[KBChunk]: ...

    def load_clusters(self) -> list[KBCluster]: ...


@dataclass
class KBContext:
    """Everything a build step needs, passed explicitly."""

    rows: KBRows
    name: str
    client: LLMClient
    indexes: KBIndexes
    config: AttributeConfig
    rules: list[Rule]
    options: KBOptions
    progress: Progress | None = None
    # where the stages' independent calls run (chunk contexts, theme and subtree batches, solutions):
    # None: here, one after another through `client`; a Ray cluster: `knowtree.distributed.RayFanout`
    calls: Calls | None = None

    def work(self) -> Calls:
        return self.calls or Here(self.client)

    def step(self, stage: str, done: int, total: int) -> None:
        if self.progress:
            self.progress(stage, done, total)


@dataclass
class KBReport:
    kb: str
    raw_issues: int
    themes: int
    clusters: int
    parents: int
    children: int
    solutions: int
    chunks: int
    usage: Usage
    seconds: float
    joined: int = 0  # `kb add`: new raw issues that joined existing clusters
    skipped: int = 0  # `kb add`: raw issues already in the KB
    restale: int = 0  # `kb add --docs`: solutions re-grounded or marked stale
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        u = self.usage
        per = u.calls / self.raw_issues if self.raw_issues else 0.0
        return (
            f"knowledge base {self.kb!r}: {self.raw_issues} raw issues → {self.themes} themes, "
            f"{self.clusters} clusters, {self.parents} parent + {self.children} child issues, "
            f"{self.solutions} solutions; {self.chunks} chunks; {u.calls} model calls ({per:.2f} per raw issue), "
            f"{u.cached} cached, {u.input_tokens:,} input + {u.output_tokens:,} output tokens, {self.seconds:.1f}s"
        )


def _hash(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:10]


# -- step 1: domain knowledge ---------------------------------------------------------------
def index_docs(ctx: KBContext, sections: Sequence[DocSection]) -> list[KBChunk]:
    chunks = chunking.chunk_sections(sections)
    if ctx.options.context == "model":
        chunking.contextualize_with_model(
            chunks,
            ctx.client,
            ctx.config.domain,
            progress=lambda d, t: ctx.step("context", d, t),
            calls=ctx.work(),
        )
    ctx.step("index", 0, len(chunks))
    ctx.indexes.add("chunks", chunking.chunk_passages(chunks))
    ctx.rows.save_parts(chunks=chunks)
    ctx.step("index", len(chunks), len(chunks))
    return chunks


# -- step 2: issues -------------------------------------------------------------------------
def features(ctx: KBContext, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(dense embeddings, the combined similarity matrix) of raw issue texts."""
    dense = cluster.center(ctx.indexes.embedder.embed(list(texts)))
    lexical = cluster.tfidf(texts)
    grounding = None
    if ctx.options.weights[2] > 0 and ctx.indexes.count("chunks"):
        docs = ctx.indexes.lexical("chunks")
        hits = []
        for text in texts:
            found = ctx.indexes.chunks.search(text, k=ctx.options.grounding_k)
            hits.append([(docs.get(pid).doc if docs.get(pid) else pid) for pid, _ in found])  # type: ignore[union-attr]
        grounding = cluster.grounding_matrix(hits)
    return dense, cluster.similarity(dense, lexical, grounding, ctx.options.weights)


def make_seeds(
    kb: str, raw: Sequence[RawIssue], sim: np.ndarray, groups: Sequence[Sequence[int]]
) -> list[subtrees.Seed]:
    seeds = []
    for group in groups:
        center = cluster.medoid(sim, group)
        order = sorted(group, key=lambda i: (i != center, -float(sim[center, i]), i))
        seeds.append(
            subtrees.Seed(
                cluster_id="c" + _hash(kb, raw[center].id),
                texts=[raw[i].text for i in order],
                raw_ids=[raw[i].id for i in order],
            )
        )
    return seeds


def centroid(dense: np.ndarray, group: Sequence[int]) -> bytes:
    import numpy as np

    v = dense[list(group)].mean(axis=0)
    n = float(np.linalg.norm(v)) or 1.0
    return (v / n).astype(np.float32).tobytes()


def theme_clusters(
    ctx: KBContext,
    seeds: Sequence[subtrees.Seed],
    groups: Sequence[Sequence[int]],
    sim: np.ndarray,
    dense: np.ndarray,
    existing: Sequence[KBTheme] = (),
    themed: Sequence[tuple[Sequence[int], str]] = (),
) -> tuple[list[KBTheme], list[str]]:
    """Themes (proposed unless `existing`) and the theme id of every seed.

    `groups[i]` are seed i's rows of `sim` (the clustering's similarity) and `dense` (its centred
    embeddings). With `theme_assign = "similarity"` each cluster takes the theme whose name is
    nearest to its members' mean embedding (`themes.nearest`). With "model" the model assigns the
    clusters of at least `theme_min` raw issues, and a smaller one takes the theme of the most
    similar themed cluster (average similarity), among those and `themed` ((raw indices, theme id)
    of clusters stored before, for `kb add`); when nothing qualifies the model assigns every one."""
    reps = [s.texts[0] for s in seeds]
    if existing:
        found = list(existing)
    else:
        names = themes.propose_themes(ctx.client, ctx.config.domain, reps, max_themes=ctx.options.max_themes)
        found = [KBTheme(id="t" + _hash(ctx.name, n), name=n) for n in names]
    if not seeds:
        return found, []
    if len(found) == 1:
        return found, [found[0].id] * len(seeds)
    if ctx.options.theme_assign == "similarity":
        names_dense = ctx.indexes.embedder.embed([t.name for t in found])
        clusters_dense = [dense[list(g)].mean(axis=0) for g in groups]
        picks = themes.nearest(names_dense, clusters_dense)
        return found, [found[p].id for p in picks]
    asked = [i for i, s in enumerate(seeds) if len(s.raw_ids) >= ctx.options.theme_min]
    if not asked and not themed:
        asked = list(range(len(seeds)))
    picks = themes.assign_themes(
        ctx.client,
        ctx.config.domain,
        [t.name for t in found],
        [reps[i] for i in asked],
        progress=lambda d, t: ctx.step("themes", d, t),
        calls=ctx.work(),
    )
    theme_of = {i: found[p].id for i, p in zip(asked, picks, strict=True)}
    rest = [i for i in range(len(seeds)) if i not in theme_of]
    pool = [(list(groups[i]), theme_of[i]) for i in asked] + [(list(g), t) for g, t in themed]
    if rest:
        import numpy as np

        # column j: every row's average similarity to pool cluster j; a seed scores its rows' mean
        to_pool = np.stack([sim[:, rows].mean(axis=1) for rows, _ in pool], axis=1)
        for i in rest:
            theme_of[i] = pool[int(to_pool[list(groups[i])].mean(axis=0).argmax())][1]
    return found, [theme_of[i] for i in range(len(seeds))]


def expand(ctx: KBContext, seeds: Sequence[subtrees.Seed]) -> tuple[list[KBIssue], dict[str, str]]:
    """Parent and child issues of each seed (`subtrees.expand_seeds`), and each raw issue's issue id."""
    return subtrees.expand_seeds(
        ctx.client,
        ctx.name,
        ctx.config,
        seeds,
        batch=ctx.options.subtree_batch,
        min_size=ctx.options.min_expand,
        progress=lambda d, t: ctx.step("subtrees", d, t),
        calls=ctx.work(),
    )


def make_clusters(
    seeds: Sequence[subtrees.Seed],
    theme_ids: Sequence[str],
    groups: Sequence[Sequence[int]],
    dense: np.ndarray,
) -> list[KBCluster]:
    return [
        KBCluster(
            id=s.cluster_id, theme_id=tid, seed_raw_id=s.raw_ids[0], centroid=centroid(dense, g), size=len(g)
        )
        for s, tid, g in zip(seeds, theme_ids, groups, strict=True)
    ]


def issue_passages(
    issues: Sequence[KBIssue],
    members: dict[str, list[tuple[str, str]]],
    ground: Callable[[Sequence[str]], dict[str, float]] | None = None,
) -> list[Passage]:
    """What the issue index sees, per issue node: its title, and each raw issue it covers as a passage
    of its own (`ISSUE|RAW`): the node ranks by its best-matching text (nearest neighbour), so a query
    worded like any one member finds it, and long clusters do not dilute BM25 as one concatenated
    text would. A parent covers its whole cluster; a child its own raw issues. With `ground`
    (`KBIndexes.ground`), the title passage carries the chunks its texts are grounded in
    (`meta["grounding"]`), which `KBIndexes.rank_issues` rolls up at query time."""
    out = []
    for issue in issues:
        key = issue.cluster_id if issue.kind == "parent" else issue.id
        texts = members.get(key, [])
        meta = {"grounding": ground([t for _, t in texts] or [issue.title])} if ground else {}
        out.append(Passage(id=issue.id, text=issue.title, doc=issue.id, meta=meta))
        out.extend(Passage(id=f"{issue.id}|{rid}", text=text, doc=issue.id) for rid, text in texts)
    return out


def member_texts(rows: Sequence[KBRaw]) -> dict[str, list[tuple[str, str]]]:
    """cluster id → its raw issues, and child issue id → the raw issues linked to it."""
    out: dict[str, list[tuple[str, str]]] = {}
    for r in rows:
        out.setdefault(r.cluster_id or "", []).append((r.id, r.text))
        if r.issue_id and r.issue_id != r.cluster_id:
            out.setdefault(r.issue_id, []).append((r.id, r.text))
    return out


def build(ctx: KBContext, raw: Sequence[RawIssue], sections: Sequence[DocSection]) -> KBReport:
    started = time.monotonic()
    ctx.indexes.reset("chunks")
    ctx.indexes.reset("issues")
    chunks = index_docs(ctx, sections)
    ctx.step("cluster", 0, len(raw))
    dense, sim = features(ctx, [r.text for r in raw])
    groups = cluster.agglomerate(sim, ctx.options.threshold, max_size=ctx.options.max_cluster)
    seeds = make_seeds(ctx.name, raw, sim, groups)
    ctx.step("cluster", len(raw), len(raw))
    found_themes, theme_ids = theme_clusters(ctx, seeds, groups, sim, dense)
    issues, links = expand(ctx, seeds)
    clusters = make_clusters(seeds, theme_ids, groups, dense)
    cluster_of = {rid: s.cluster_id for s in seeds for rid in s.raw_ids}
    rows = [KBRaw(r.id, r.text, r.timestamp, cluster_of[r.id], links[r.id]) for r in raw]
    ctx.rows.save_parts(raw=rows, themes=found_themes, clusters=clusters, issues=issues)
    ctx.indexes.add("issues", issue_passages(issues, member_texts(rows), ctx.indexes.ground))
    solved = 0
    if ctx.options.solutions == "eager":
        solved = solve_all(ctx, issues, {c.id: c for c in chunks})
    parents = sum(i.kind == "parent" for i in issues)
    return KBReport(
        kb=ctx.name,
        raw_issues=len(raw),
        themes=len(found_themes),
        clusters=len(clusters),
        parents=parents,
        children=len(issues) - parents,
        solutions=solved,
        chunks=len(chunks),
        usage=ctx.client.usage.model_copy(),
        seconds=time.monotonic() - started,
    )


def solve_one(ctx: KBContext, issue: KBIssue, chunks: dict[str, KBChunk]) -> KBIssue:
    passages = solutions.retrieve_chunks(ctx.indexes, chunks, issue)
    solution, status, report = compliance.solve(ctx.client, ctx.config.domain, issue, passages, ctx.rules)
    ctx.rows.save_solution(issue.id, solution, status, report)
    issue.solution, issue.status, issue.compliance = solution, status, report
    return issue


def solve_all(ctx: KBContext, issues: Sequence[KBIssue], chunks: dict[str, KBChunk]) -> int:
    """Every issue's solution (`compliance.solve` on the chunks retrieved for it here), each stored
    as it arrives; the issues' calls are independent (`ctx.calls`)."""
    items = [(issue, solutions.retrieve_chunks(ctx.indexes, chunks, issue)) for issue in issues]
    made = ctx.work().map(partial(compliance.solve_item, ctx.config.domain, ctx.rules), items)
    for n, (i, (solution, status, report)) in enumerate(made, start=1):
        issue = issues[i]
        ctx.rows.save_solution(issue.id, solution, status, report)
        issue.solution, issue.status, issue.compliance = solution, status, report
        ctx.step("solutions", n, len(issues))
    return len(issues)
