"""Choose the documents of a collection that a question needs, then search inside them.

Strategies (the user may force one; `auto` picks):

* `metadata`: the model derives filters from the question (company, year, type, and any field the
  user supplied at build time), constrained to the values the collection holds; documents matching
  every filter are chosen. No match: the least important filter is dropped (type, then year...).
* `describe`: the model picks from the one-sentence descriptions made at build time.
* `semantic`: leaves are embedded; the `top_k` most similar to the question score their document as
  Σ score / √(N+1) (N: that document's leaves among them), so one strong document beats many
  weak mentions; the best documents (within 60 % of the top score, at most `max_docs`) are chosen.

`auto`: metadata when the documents have some, falling back to descriptions (or, without
descriptions, semantic scoring) when no document matches; descriptions when there are no metadata;
semantic when neither exists.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, StrictInt, create_model

from knowtree.errors import ModelOutputError
from knowtree.llm.client import LLMClient
from knowtree.prompts.reply import Reply, ask, narrowed, one_of, string
from knowtree.records import DocInfo
from knowtree.types import NavStep, Node, Usage

# fields dropped first when no document matches every filter
_DROP_ORDER = ("doc_type", "year")


@dataclass
class Selection:
    docs: list[DocInfo]
    strategy: str
    step: NavStep
    usage: Usage


class Pick(Reply):
    """The documents picked from the numbered descriptions (numbers and count limited per call)."""

    thinking: str = string(240)
    docs: list[StrictInt]


_FILTERS: dict[tuple[tuple[str, tuple[str, ...]], ...], type[BaseModel]] = {}


def filter_reply(fields: dict[str, list[str]]) -> type[BaseModel]:
    """The metadata filter reply: one field per metadata key, "" or one of the values the documents hold."""
    key = tuple((k, tuple(v)) for k, v in fields.items())
    if key not in _FILTERS:
        _FILTERS[key] = create_model(  # type: ignore[call-overload]
            "MetaFilter",
            __base__=Reply,
            **{k: (str, one_of(["", *v], default="")) for k, v in fields.items()},
        )
    return _FILTERS[key]


def _label(i: DocInfo) -> str:
    meta = ", ".join(f"{k}: {v}" for k, v in sorted(i.meta.items()))
    return f"{i.path}: {i.description or '(no description)'}" + (f" [{meta}]" if meta else "")


def select_documents(
    question: str,
    infos: list[DocInfo],
    client: LLMClient,
    *,
    strategy: str = "auto",
    max_docs: int = 3,
    nodes: dict[str, Node] | None = None,
    index_path: str | Any | None = None,
    index_name: str = "collection",
) -> Selection:
    if strategy == "auto":
        if any(i.meta for i in infos):
            sel = by_metadata(question, infos, client, max_docs=max_docs)
            if sel.docs:
                return sel
            if any(i.description for i in infos):
                fallback = by_description(question, infos, client, max_docs=max_docs)
            else:
                assert nodes is not None
                fallback = by_semantic(
                    question, infos, nodes, max_docs=max_docs, index_path=index_path, index_name=index_name
                )
            fallback.usage.add(sel.usage)
            fallback.step.reason = f"{sel.step.reason}; {fallback.step.reason}".strip("; ")
            fallback.step.outcome = f"metadata matched no document; {fallback.step.outcome}"
            return fallback
        if any(i.description for i in infos):
            return by_description(question, infos, client, max_docs=max_docs)
        strategy = "semantic"
    if strategy == "metadata":
        return by_metadata(question, infos, client, max_docs=max_docs)
    if strategy == "describe":
        return by_description(question, infos, client, max_docs=max_docs)
    if strategy == "semantic":
        assert nodes is not None
        return by_semantic(
            question, infos, nodes, max_docs=max_docs, index_path=index_path, index_name=index_name
        )
    raise ValueError(f"unknown collection strategy {strategy!r}")


def by_description(question: str, infos: list[DocInfo], client: LLMClient, *, max_docs: int) -> Selection:
    shown = "\n".join(f"[{k}] {_label(i)}" for k, i in enumerate(infos))
    n = len(infos)

    def check(reply: Pick) -> None:
        if not reply.docs or any(not 0 <= d < n for d in reply.docs):
            raise ValueError(f"docs must hold 1 to {max_docs} numbers from 0 to {n - 1}")

    step = NavStep(action="choose", options=[i.node_id for i in infos])
    started = time.monotonic()
    try:
        result = ask(
            client,
            narrowed(Pick, docs={"maxItems": max_docs, "items": {"type": "integer", "enum": list(range(n))}}),
            "collection_pick",
            max_docs=max_docs,
            question=question,
            documents=shown,
            purpose="collection",
            max_tokens=200,
            check=check,
        )
    except ModelOutputError as exc:
        step.error = str(exc)
        step.outcome = "no usable reply: every document is searched"
        return Selection(
            list(infos), "describe", step, exc.usage if isinstance(exc.usage, Usage) else Usage()
        )
    chosen = [infos[d] for d in dict.fromkeys(result.value.docs)][:max_docs]
    step.reason = result.value.thinking
    step.choice = chosen[0].node_id
    step.outcome = "describe: " + ", ".join(i.path for i in chosen)
    step.tokens = result.usage.input_tokens + result.usage.output_tokens
    step.cached = result.cached
    step.latency_s = round(time.monotonic() - started, 3)
    return Selection(chosen, "describe", step, result.usage)


def _fields(infos: list[DocInfo]) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for i in infos:
        for k, v in i.meta.items():
            if v and v not in values.setdefault(k, []):
                values[k].append(v)
    return {k: sorted(v) for k, v in sorted(values.items()) if k}


def by_metadata(question: str, infos: list[DocInfo], client: LLMClient, *, max_docs: int) -> Selection:
    fields = _fields(infos)
    step = NavStep(action="choose", options=[i.node_id for i in infos])
    if not fields:
        step.outcome = "metadata: the documents have none"
        return Selection([], "metadata", step, Usage())
    shown = "\n".join(f"- {k}: " + " | ".join(v) for k, v in fields.items())
    started = time.monotonic()
    try:
        result = ask(
            client,
            filter_reply(fields),
            "collection_filter",
            fields=shown,
            question=question,
            purpose="collection_filter",
            max_tokens=120,
        )
    except ModelOutputError as exc:
        step.error = str(exc)
        step.outcome = "metadata: no usable reply"
        return Selection([], "metadata", step, exc.usage if isinstance(exc.usage, Usage) else Usage())
    wanted = {k: str(getattr(result.value, k, "") or "").strip() for k in fields}
    wanted = {k: v for k, v in wanted.items() if v}
    step.tokens = result.usage.input_tokens + result.usage.output_tokens
    step.cached = result.cached
    step.latency_s = round(time.monotonic() - started, 3)
    step.reason = "filters: " + (", ".join(f"{k}={v}" for k, v in wanted.items()) or "none")

    def matching(filters: dict[str, str]) -> list[DocInfo]:
        return [i for i in infos if all(i.meta.get(k, "").lower() == v.lower() for k, v in filters.items())]

    chosen: list[DocInfo] = []
    filters = dict(wanted)
    if filters:
        chosen = matching(filters)
        drop = [k for k in _DROP_ORDER if k in filters] + [
            k for k in filters if k not in _DROP_ORDER and k != "company"
        ]
        while not chosen and drop:
            filters.pop(drop.pop(0))
            chosen = matching(filters) if filters else []
    if len(chosen) > max_docs:
        chosen = []  # the filters do not narrow enough to choose
    step.outcome = "metadata: " + (", ".join(i.path for i in chosen) or "no document matches")
    if chosen:
        step.choice = chosen[0].node_id
    return Selection(chosen, "metadata", step, result.usage)


def by_semantic(
    question: str,
    infos: list[DocInfo],
    nodes: dict[str, Node],
    *,
    max_docs: int,
    top_k: int = 30,
    index_path: str | Any | None = None,
    index_name: str = "collection",
) -> Selection:
    from knowtree.retrieve.bm25 import Passage
    from knowtree.retrieve.vectors import VectorIndex

    owner: dict[str, DocInfo] = {}
    passages: list[Passage] = []
    for info in infos:
        stack = [info.node_id]
        while stack:
            n = nodes[stack.pop()]
            if n.is_leaf:
                owner[n.id] = info
                passages.append(Passage(id=n.id, text=f"{n.meta.title}\n{n.text[:2000]}", doc=info.path))
            else:
                stack.extend(n.children)
    started = time.monotonic()
    with VectorIndex(index_path or ":memory:", name=index_name) as index:
        index.ensure(passages)
        hits = index.search(question, k=top_k)
    per_doc: dict[str, list[float]] = {}
    for pid, score in hits:
        per_doc.setdefault(owner[pid].path, []).append(max(score, 0.0))
    scores = {p: sum(v) / math.sqrt(len(v) + 1) for p, v in per_doc.items()}
    ranked = sorted(scores, key=lambda p: -scores[p])
    best = scores[ranked[0]] if ranked else 0.0
    keep = [p for p in ranked if scores[p] >= 0.6 * best][:max_docs]
    by_path = {i.path: i for i in infos}
    chosen = [by_path[p] for p in keep]
    step = NavStep(
        action="choose",
        options=[i.node_id for i in infos],
        choice=chosen[0].node_id if chosen else None,
        reason="Σ score / √(N+1) over the top passages: "
        + ", ".join(f"{p} {scores[p]:.2f}" for p in ranked[:5]),
        outcome="semantic: " + (", ".join(keep) or "nothing similar"),
        latency_s=round(time.monotonic() - started, 3),
    )
    return Selection(chosen, "semantic", step, Usage())
