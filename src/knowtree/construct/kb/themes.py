"""Issue themes (the seed's Prompts G.6 and G.7), asked over clusters, not raw issues.

The seed classifies every raw issue with one call each; here raw issues are clustered first, so the
model sees one representative per cluster: one call proposes the themes from (up to
`MAX_SHOWN`) representatives, then clusters are assigned in batches, each batch one call whose reply
has an integer field per cluster constrained (enum) to the theme numbers. The builder then asks only
for clusters of ≥ `theme_min` raw issues; a lone issue takes its most similar cluster's theme
(`builder.theme_clusters`).

That assignment is the builder's `theme_assign = "model"`. By default ("similarity", `nearest`)
clusters are assigned with no call, to the theme whose name is nearest to them: the embedded 1.5B model answered by position
(issue_1 → 2, issue_2 → 3, ...), as good as random on the medical issues (benchmarks/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, create_model

from knowtree.construct.calls import Calls, Here, in_order
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import ask, at_most
from knowtree.text import clip

MAX_SHOWN = 40
ASSIGN_BATCH = 20
MISC = "Miscellaneous"


class ThemeList(BaseModel):
    # at most 12 asked for (schema only: the names are cut to `max_themes` below, and a 13th name is
    # no reason to refuse the reply)
    themes: list[str] = at_most(12, min_length=1)


def propose_themes(
    client: LLMClient, domain: str, representatives: Sequence[str], *, max_themes: int = 10
) -> list[str]:
    """Theme names (deduplicated, a miscellaneous theme always last)."""
    shown = list(representatives)[:MAX_SHOWN]
    reply = ask(
        client,
        ThemeList,
        "kb_themes",
        domain=domain or "general",
        issues="\n".join(f"- {clip(t, 200, keep_space=True)}" for t in shown),
        max_themes=max_themes,
        purpose="kb_themes",
        max_tokens=300,
    ).value
    names: list[str] = []
    for name in reply.themes:
        name = clip(name, 80, keep_space=True).strip(" .")
        if name and name.lower() not in {n.lower() for n in names} and not name.lower().startswith("misc"):
            names.append(name)
    return [*names[: max_themes - 1], MISC]


def nearest(names_dense: Any, clusters_dense: Sequence[Any]) -> list[int]:
    """The theme index of every cluster without a model: the theme whose name's embedding is nearest
    (cosine) to the cluster's mean embedding. Both sides are mean-centred, since every name shares
    the domain's words and every issue the domain's vocabulary: the names here, the clusters by the
    caller (the builder's issue embeddings are centred over all raw issues, so a `kb add` of one
    new cluster is placed in the same space). The miscellaneous theme competes by its name."""
    import numpy as np

    from knowtree.retrieve.embed import normalize

    t = np.asarray(names_dense, dtype=np.float32)
    c = np.stack([np.asarray(v, dtype=np.float32) for v in clusters_dense])
    if len(t) > 1:
        t = t - t.mean(axis=0)
    return [int(b) for b in (normalize(c) @ normalize(t).T).argmax(axis=1)]


def assignment_model(count: int, themes: int) -> type[BaseModel]:
    choice: Any = Literal[tuple(range(1, themes + 1))]  # type: ignore[misc]
    fields: dict[str, Any] = {f"issue_{i + 1}": (choice, ...) for i in range(count)}
    return create_model(f"ThemeAssignment{count}x{themes}", __config__=ConfigDict(extra="ignore"), **fields)


def assign_themes(
    client: LLMClient,
    domain: str,
    themes: Sequence[str],
    representatives: Sequence[str],
    *,
    batch: int = ASSIGN_BATCH,
    progress: Callable[[int, int], None] | None = None,
    calls: Calls | None = None,
) -> list[int]:
    """The theme index (0-based) of every representative; one call per `batch` of them, the batches
    independent (`calls`, default: one after another through `client`)."""
    listing = "\n".join(f"{i}. {t}" for i, t in enumerate(themes, start=1))
    parts = [list(representatives[start : start + batch]) for start in range(0, len(representatives), batch)]
    answered = (calls or Here(client)).map(partial(assign_batch, domain, listing, len(themes)), parts)
    return [pick for picks in in_order(answered, [len(p) for p in parts], progress) for pick in picks]


def assign_batch(domain: str, listing: str, themes: int, client: LLMClient, part: list[str]) -> list[int]:
    """One call: the theme index (0-based) of each of a batch of representatives."""
    reply = ask(
        client,
        assignment_model(len(part), themes),
        "kb_theme_assign",
        domain=domain or "general",
        themes=listing,
        issues="\n".join(f"issue_{i}: {clip(t, 200, keep_space=True)}" for i, t in enumerate(part, start=1)),
        purpose="kb_theme_assign",
        max_tokens=12 * len(part) + 40,
    ).value
    return [int(getattr(reply, f"issue_{i}")) - 1 for i in range(1, len(part) + 1)]
