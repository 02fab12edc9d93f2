"""Answering a live query from a knowledge base: the seed's Algorithm 2 (hybrid retrieval).

1. the query's metadata is extracted against the attribute configuration (the model, values
   constrained to the allowed sets; or keywords, no model);
2. semantic top-k over the issue nodes (`KBIndexes.rank_issues`): each issue's title and member
   texts scored by mean-centred dense + TF-IDF cosine (`retrieve/similarity.py`), an issue by its
   best text, plus the roll-up of the query's chunk ranking through the chunks each issue is
   grounded in;
3. each target issue in rank order: metadata equal → **exact**; the query's values inside the
   issue's (a broader parent) → **subset**, then its children are searched for an exact match;
   otherwise (**mismatch**) a child's parent is checked the same way and its siblings searched,
   else the target is discarded. A query's `any` means "not stated": a parent that fixes a value
   the query leaves unsaid is kept as `narrower` (the seed's extraction always fills every
   attribute; a real user's query rarely states them all), a conflicting value discards it.
   A discarded target is demoted below every accepted issue (match `semantic`), not dropped.

The first accepted issue is the answer. When every target is discarded, the best semantic target is
returned with match `semantic` and the discards are in the trace (never silently).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from knowtree.errors import ModelOutputError
from knowtree.ingest.kb_attributes import compare, describe, keyword_metadata, metadata_model, normalize
from knowtree.ingest.kb_inputs import AttributeConfig
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import ask
from knowtree.records import KBIssue
from knowtree.retrieve.kbindex import KBIndexes

# Document passages for the query itself that come with every answer. TV dev (58 questions): the
# contextualized hybrid chunk search puts a passage of the question's manual section first for
# 0.552 (top 3: 0.776) against 0.517 (0.724) for flat BM25 over the raw chunks; benchmarks/RESULTS.md
PASSAGES = 3


@dataclass
class Accepted:
    issue: KBIssue
    match: str  # exact | subset | narrower | child-exact | sibling-exact | parent-exact/subset/narrower | semantic
    target: str  # the semantic hit it came from
    score: float


@dataclass
class KBAnswer:
    query: str
    query_metadata: dict[str, str]
    issue: KBIssue | None
    match: str
    accepted: list[Accepted] = field(default_factory=list)
    solution: dict[str, Any] | None = None
    status: str = ""
    #: the rules the solution still breaks after its regeneration (why `status` is "flagged")
    violations: list[dict[str, Any]] = field(default_factory=list)
    members: list[str] = field(default_factory=list)
    trace: list[dict[str, Any]] = field(default_factory=list)
    #: the document passages that answer the query itself (`query_passages`), beside the issue's
    #: solution, which was written for the issue: a question no KB issue covers still gets its evidence
    passages: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        issue = None
        if self.issue is not None:
            i = self.issue
            issue = {
                "id": i.id,
                "kind": i.kind,
                "parent": i.parent,
                "title": i.title,
                "metadata": i.metadata,
                "cluster": i.cluster_id,
                "members": len(self.members),
            }
        return {
            "query": self.query,
            "query_metadata": self.query_metadata,
            "match": self.match,
            "issue": issue,
            "solution": (self.solution or {}).get("text"),
            "citations": (self.solution or {}).get("citations", []),
            "status": self.status,
            "violations": self.violations,
            "ranked": [
                {"id": a.issue.id, "match": a.match, "target": a.target, "score": round(a.score, 5)}
                for a in self.accepted
            ],
            "passages": self.passages,
            "trace": self.trace,
        }


def query_metadata(
    query: str, config: AttributeConfig, client: LLMClient | None, trace: list[dict[str, Any]]
) -> dict[str, str]:
    """The model's extraction (constrained) when a client is given, else keywords. A reply that stays
    invalid falls back to keywords and is recorded in the trace."""
    if client is None:
        meta = keyword_metadata(query, config)
        trace.append({"step": "metadata", "how": "keywords", "metadata": meta})
        return meta
    model = metadata_model(config, name="QueryMetadata")
    try:
        reply = ask(
            client,
            model,
            "kb_query_meta",
            domain=config.domain or "general",
            attributes=describe(config),
            query=query,
            purpose="kb_query_meta",
            max_tokens=40 + 16 * len(config.attributes),
        )
    except ModelOutputError as exc:
        meta = keyword_metadata(query, config)
        trace.append(
            {"step": "metadata", "how": "keywords (model reply invalid)", "error": str(exc), "metadata": meta}
        )
        return meta
    meta = normalize(reply.value.model_dump(), config)
    trace.append({"step": "metadata", "how": "model", "metadata": meta})
    return meta


def query_passages(indexes: KBIndexes, chunks: Any, query: str, k: int) -> list[dict[str, Any]]:
    """The query's own top-k document chunks (BM25 + dense over the contextualized chunks, no model
    call), best first, with their ids, document, section path and text. `chunks(ids)`: the stored
    chunks of those ids."""
    if k <= 0:
        return []
    hits = indexes.chunks.search(query, k=k)
    found = {c.id: c for c in chunks([pid for pid, _ in hits])}
    return [
        {
            "chunk": pid,
            "doc_id": found[pid].doc_id,
            "source": found[pid].source,
            "path": found[pid].path,
            "text": found[pid].text,
            "score": round(score, 5),
        }
        for pid, score in hits
        if pid in found
    ]


def hybrid_retrieve(
    query: str,
    qmeta: dict[str, str],
    issues: dict[str, KBIssue],
    indexes: KBIndexes,
    *,
    k: int = 5,
    trace: list[dict[str, Any]] | None = None,
) -> list[Accepted]:
    """Algorithm 2 over the top-k issue nodes; accepted issues in order, each once."""
    trace = trace if trace is not None else []
    children: dict[str, list[KBIssue]] = {}
    for i in issues.values():
        if i.parent:
            children.setdefault(i.parent, []).append(i)
    for kids in children.values():
        kids.sort(key=lambda c: c.position)
    # issue nodes by their best passage (title or member) and their grounding chunks (roll-up)
    targets = [(n, s) for n, s in indexes.rank_issues(query, depth=max(50, 10 * k)) if n in issues][:k]
    trace.append({"step": "semantic", "top": [{"id": p, "score": round(s, 5)} for p, s in targets]})
    accepted: list[Accepted] = []
    seen: set[str] = set()
    discarded: list[tuple[str, float]] = []

    def accept(issue: KBIssue, match: str, target: str, score: float) -> None:
        if issue.id not in seen:
            seen.add(issue.id)
            accepted.append(Accepted(issue, match, target, score))

    for pid, score in targets:
        target = issues[pid]
        kind = compare(qmeta, target.metadata)
        step: dict[str, Any] = {"step": "match", "target": pid, "kind": target.kind, "metadata": kind}
        if kind == "exact":
            accept(target, "exact", pid, score)
            step["accepted"] = pid
        elif kind == "subset":
            child = _exact_child(qmeta, children.get(target.id, []))
            if child is not None:
                accept(child, "child-exact", pid, score)
                step["accepted"] = child.id
            else:
                accept(target, "subset", pid, score)
                step["accepted"] = pid
        elif target.kind == "child" and target.parent in issues:
            parent = issues[target.parent]
            parent_kind = compare(qmeta, parent.metadata)
            if parent_kind != "mismatch":
                sibling = _exact_child(qmeta, children.get(parent.id, []))
                if sibling is not None:
                    accept(sibling, "sibling-exact", pid, score)
                    step["accepted"] = sibling.id
                else:
                    accept(parent, "parent-" + parent_kind, pid, score)
                    step["accepted"] = parent.id
            else:
                step["discarded"] = "parent metadata conflicts with the query"
                discarded.append((pid, score))
        elif kind == "narrower":  # a top-level issue fixing what the query leaves unsaid: kept, marked
            accept(target, "narrower", pid, score)
            step["accepted"] = pid
        else:
            step["discarded"] = "metadata conflicts with the query"
            discarded.append((pid, score))
        trace.append(step)
    if discarded and not accepted:
        trace.append(
            {
                "step": "fallback",
                "note": "every target was discarded by metadata; best semantic hit returned",
                "accepted": discarded[0][0],
            }
        )
    # a discarded target is demoted, not dropped: after every accepted issue, in semantic order,
    # so a wrong metadata extraction cannot lose the best semantic candidate from the top k
    for pid, score in discarded:
        accept(issues[pid], "semantic", pid, score)
    return accepted


def _exact_child(qmeta: dict[str, str], kids: Sequence[KBIssue]) -> KBIssue | None:
    for child in kids:
        if compare(qmeta, child.metadata) == "exact":
            return child
    return None
