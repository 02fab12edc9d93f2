"""What a build will cost, before it starts: model calls and tokens estimated from the chunk count.

Documents already stored unchanged in the tree are left out (their calls come from the cache). The
estimate is rough on purpose (prompt size ≈ characters / 4, plus each prompt's fixed part and a
typical reply); it exists to stop a 50 MB file from starting 12,000 calls without a word.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from knowtree.config import Settings
from knowtree.errors import UserError

if TYPE_CHECKING:
    from knowtree.ingest.structure import StructuredDocument

PROMPT_OVERHEAD_TOKENS = 450  # instructions + schema of a leaf / branch prompt
REPLY_TOKENS = 250  # a typical structured reply


@dataclass
class BuildEstimate:
    documents: int  # new or changed documents (the others are answered from the cache)
    characters: int
    calls: int
    tokens: int
    cost_usd: float | None  # None: the model has no prices configured
    action: str = "build"  # what is estimated: a build, an enrich
    scope: str = ""  # what it works on, said after the calls (default: the documents and characters)

    def line(self) -> str:
        cost = f", about ${self.cost_usd:.2f}" if self.cost_usd else ""
        scope = self.scope or (
            f"for {self.documents} new or changed document(s), {self.characters:,} characters"
        )
        return f"this {self.action} will make about {self.calls:,} model calls (~{self.tokens:,} tokens{cost}) {scope}"


Confirm = Callable[[BuildEstimate], bool]


def estimate_build(
    documents: Sequence[tuple[str, str, int]],
    settings: Settings,
    *,
    leaf_chars: int | None = None,
    extra_calls_per_doc: int = 0,
    unchanged: frozenset[tuple[str, str]] = frozenset(),
    input_cost_per_mtok: float = 0.0,
    output_cost_per_mtok: float = 0.0,
) -> BuildEstimate:
    """`documents`: (path, sha256, characters) of each input; `unchanged`: (path, sha256) pairs the
    tree already holds (left out). With `summaries="none"` the leaves and branches cost no call (the
    zero-call tree): only `extra_calls_per_doc` is left."""
    size = leaf_chars or settings.chunk_size
    step = max(1, size - settings.chunk_overlap)
    leaves = docs = chars = 0
    for path, sha, length in documents:
        if (path, sha) in unchanged:
            continue
        docs += 1
        chars += length
        leaves += max(1, math.ceil(length / step))
    if settings.summaries == "none":
        leaves = 0  # no metadata: no leaf or branch call at all
    branches = 0
    level = leaves
    while level > 1:  # one synthesis call per branch, level by level up to the root
        level = math.ceil(level / settings.max_children)
        branches += level
    calls = leaves + branches + extra_calls_per_doc * docs
    read = chars // 4 if leaves else 0  # the text is shown to the model only when leaves are summarized
    input_tokens = read + calls * PROMPT_OVERHEAD_TOKENS + branches * settings.max_children * 120
    output_tokens = calls * REPLY_TOKENS
    priced = input_cost_per_mtok or output_cost_per_mtok
    cost = (
        (input_tokens * input_cost_per_mtok + output_tokens * output_cost_per_mtok) / 1e6 if priced else None
    )
    return BuildEstimate(docs, chars, calls, input_tokens + output_tokens, cost)


def eager_paths(sources: Sequence[StructuredDocument], summaries: str) -> frozenset[str]:
    """Which documents get metadata now: all (eager), none (none/lazy), or, for auto, all but the
    paged ones (a long PDF summarized in full on a small local model takes hours; its titles-only
    tree costs no call)."""
    if summaries == "eager":
        return frozenset(s.path for s in sources)
    if summaries in ("none", "lazy"):
        return frozenset()
    return frozenset(s.path for s in sources if not s.pages)


def estimate_sources(
    sources: Sequence[StructuredDocument],
    settings: Settings,
    *,
    summaries: str,
    unchanged: frozenset[tuple[str, str]] = frozenset(),
) -> BuildEstimate:
    """The estimate for a structured build: documents that get summaries now cost a call per section
    (about one per `node_max_chars`); the others (PDFs under `summaries=auto`, or none/lazy) only the
    structure search of a PDF without an outline (1 + a call per 40 pages) and the description."""
    eager = eager_paths(sources, summaries)
    summarized = [(sd.path, sd.document.sha256, len(sd.document.text)) for sd in sources if sd.path in eager]
    est = estimate_build(
        summarized,
        settings,
        leaf_chars=settings.node_max_chars,
        unchanged=unchanged,
        input_cost_per_mtok=settings.input_cost_per_mtok,
        output_cost_per_mtok=settings.output_cost_per_mtok,
    )
    extra = docs = chars = 0
    for sd in sources:
        if (sd.path, sd.document.sha256) in unchanged:
            continue
        docs += 1
        chars += len(sd.document.text)
        extra += 1 if settings.describes_documents() else 0
        if sd.pages and not sd.sections:
            extra += 1 + math.ceil(len(sd.pages) / 40)
    tokens = est.tokens + extra * (PROMPT_OVERHEAD_TOKENS + 1500 + REPLY_TOKENS)
    return BuildEstimate(docs, chars, est.calls + extra, tokens, est.cost_usd)


def confirm_estimate(estimate: BuildEstimate, settings: Settings, confirm: Confirm | None) -> None:
    """Ask `confirm` when the estimate passes `settings.confirm_calls` (and no --max-calls caps the
    build); a refusal raises `UserError` before anything is called or stored."""
    if confirm is None or estimate.calls <= settings.confirm_calls or settings.max_calls is not None:
        return
    if not confirm(estimate):
        raise UserError(f"{estimate.action} not started: {estimate.line()}")
