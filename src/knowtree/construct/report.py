"""What a build, an enrich step or a removal did, as the facades report it: `BuildReport`
(`knowtree build`), `EnrichReport` (`knowtree enrich`) and `RemoveReport` (`knowtree rm --doc`).
Plain records: the facade fills in the run id and the time."""

from __future__ import annotations

from dataclasses import dataclass, field

from knowtree.types import Usage


def _spent(u: Usage, priced: bool) -> str:
    """Tokens (and their cost, when the model has prices or a cost was recorded), cache hits, calls."""
    cost = f" (${u.cost_usd:.4f})" if priced or u.cost_usd else ""
    return (
        f"{u.input_tokens:,} input + {u.output_tokens:,} output tokens{cost}, "
        f"{u.cached} answered from cache, {u.calls} LLM calls"
    )


@dataclass
class BuildReport:
    tree: str
    root_id: str
    documents: int
    nodes: int
    leaves: int
    depth: int
    fallbacks: int
    usage: Usage
    seconds: float
    run_id: str
    priced: bool = False  # the model has prices configured: the cost in USD is known
    skipped: list[str] = field(default_factory=list)  # "path: reason" of each file --skip-bad left out

    def line(self) -> str:
        skipped = f"; skipped {len(self.skipped)} bad file(s)" if self.skipped else ""
        return (
            f"built tree {self.tree!r}: {self.documents} document(s), {self.nodes} nodes "
            f"({self.leaves} leaves, depth {self.depth}) in {self.seconds:.1f}s; "
            f"{_spent(self.usage, self.priced)}{skipped}"
        )


@dataclass
class EnrichReport:
    """What `Tree.enrich` did: nodes that got model-written metadata, nodes kept as they were
    (already summarized), malformed replies (their nodes left as they were) and index entries written
    again (only those the new metadata changed)."""

    tree: str
    enriched: int
    kept: int
    fallbacks: int
    reindexed: int
    usage: Usage
    seconds: float
    run_id: str
    priced: bool = False

    def line(self) -> str:
        kept = f", {self.kept} already summarized kept" if self.kept else ""
        failed = (
            f"; {self.fallbacks} malformed repl{'y' if self.fallbacks == 1 else 'ies'}: "
            "those nodes left as they were (run again to retry them)"
            if self.fallbacks
            else ""
        )
        return (
            f"enriched tree {self.tree!r}: {self.enriched} node(s) got metadata{kept}, "
            f"{self.reindexed} index entries updated, in {self.seconds:.1f}s; "
            f"{_spent(self.usage, self.priced)}{failed}"
        )


@dataclass
class RemoveReport:
    """What `remove_document` did: the exact document removed, and the model the tree has now."""

    tree: str
    removed: str
    documents_left: int
    model_before: str
    model_after: str
    usage: Usage

    def line(self) -> str:
        if not self.documents_left:
            return f"removed {self.removed!r}, the last document of tree {self.tree!r}: the tree is deleted"
        relabel = (
            f"; rebuilt with {self.model_after} (it was built with {self.model_before})"
            if self.model_after != self.model_before
            else ""
        )
        return (
            f"removed {self.removed!r} from tree {self.tree!r} ({self.documents_left} document(s) left; "
            f"{self.usage.calls} LLM calls, {self.usage.cached} answered from cache{relabel})"
        )
