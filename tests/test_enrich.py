"""The enrich step (metadata for a zero-call tree) and the eval methods built on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from knowtree.construct.enrich import enrich_tree
from knowtree.construct.taxonomy import DEFAULT_TAXONOMY
from knowtree.errors import UserError
from knowtree.llm.base import Request
from knowtree.llm.client import LLMClient
from knowtree.testing.models import FunctionModel, KeywordModel
from knowtree.types import Node, NodeKind, NodeMeta


def _tree() -> tuple[list[Node], str]:
    """root → session (2 runs of turns) + a short session of turns: turns are small leaves."""

    def leaf(i: int, text: str) -> Node:
        return Node(id=f"t{i}", kind=NodeKind.LEAF, level=0, meta=NodeMeta(title="Ann"), text=text)

    turns = [leaf(i, t) for i, t in enumerate(["We adopted a dog.", "Her name is Pixel.", "I paint lakes.", "Blue ones.", "Bye."])]
    run1 = Node(id="r1", kind=NodeKind.BRANCH, level=1, meta=NodeMeta(), children=["t0", "t1"])
    run2 = Node(id="r2", kind=NodeKind.BRANCH, level=1, meta=NodeMeta(), children=["t2", "t3"])
    s1 = Node(
        id="s1", kind=NodeKind.BRANCH, level=2, children=["r1", "r2"],
        meta=NodeMeta(title="Session 1, 8 May 2023", time_range=["8 May 2023"], about=["Ann", "Bo"]),
    )
    s2 = Node(id="s2", kind=NodeKind.BRANCH, level=2, meta=NodeMeta(title="Session 2"), children=["t4"])
    root = Node(id="root", kind=NodeKind.ROOT, level=3, meta=NodeMeta(title="Conversation"), children=["s1", "s2"])
    return [*turns, run1, run2, s1, s2, root], "root"


def _replies(shown: list[tuple[str, str]], *, bad: str = "") -> Any:
    def reply(request: Request) -> Any:
        text = request.messages[-1].content
        if "about" in (request.schema_ or {}).get("properties", {}):  # a leaf's metadata
            shown.append(("leaf", text))
            if bad and any(bad in m.content for m in request.messages):  # repairs too
                return "not json at all"
            return {"summary": f"summary of {len(shown)}", "content_types": ["chat"], "critical_actions": [],
                    "decisions": [], "noteworthy_events": [], "about": ["Pixel" if "Pixel" in text else "lakes"]}
        shown.append(("branch", text))
        return {"summary": "the session", "critical_actions": [], "decisions": ["adopt a dog"], "noteworthy_events": []}

    return reply


def test_enrich_summarizes_runs_of_small_leaves_then_synthesizes_upwards() -> None:
    nodes, root = _tree()
    shown: list[tuple[str, str]] = []
    client = LLMClient(FunctionModel(_replies(shown), max_concurrency=1))
    done = enrich_tree(nodes, root, client, DEFAULT_TAXONOMY)
    # one call per run of leaves (its turns' text), one synthesis per branch above; no turn, no root
    assert [kind for kind, _ in shown] == ["leaf", "leaf", "leaf", "branch"]
    assert "We adopted a dog." in shown[0][1] and "Her name is Pixel." in shown[0][1]
    assert set(done.metas) == {"r1", "r2", "s2", "s1"} and done.fallbacks == 0
    s1 = done.metas["s1"]
    assert s1.summary == "the session" and s1.decisions == ["adopt a dog"]
    # the tree's own structure stays: title, time range, and its `about` first
    assert s1.title == "Session 1, 8 May 2023" and s1.time_range == ["8 May 2023"]
    assert s1.about[:2] == ["Ann", "Bo"] and "Pixel" in s1.about
    assert done.metas["s2"].title == "Session 2" and done.metas["s2"].summary
    assert done.usage.calls == 4


def test_enrich_leaves_too_and_the_root_when_asked() -> None:
    nodes, root = _tree()
    shown: list[tuple[str, str]] = []
    done = enrich_tree(nodes, root, LLMClient(FunctionModel(_replies(shown))), DEFAULT_TAXONOMY, leaves=True, root=True)
    assert sum(1 for k, _ in shown if k == "leaf") == 5  # every turn
    assert "root" in done.metas and {"t0", "r1", "s2"} <= set(done.metas)
    assert done.metas["s2"].summary == done.metas["t4"].summary  # a single child's metadata, no call


def test_a_malformed_reply_leaves_the_node_as_it_was_and_is_counted() -> None:
    nodes, root = _tree()
    shown: list[tuple[str, str]] = []
    client = LLMClient(FunctionModel(_replies(shown, bad="I paint lakes.")))
    done = enrich_tree(nodes, root, client, DEFAULT_TAXONOMY)
    assert done.fallbacks == 1 and "r2" not in done.metas
    assert "s1" in done.metas  # synthesized from the child that has metadata


def _mc_dataset(tmp_path: Path) -> Path:
    docs = [
        {"id": "garden.md", "text": "Mara grew tomatoes and basil behind the lighthouse every summer."},
        {"id": "ship.md", "text": "The captain logged a storm off the northern cape in March."},
        {"id": "market.md", "text": "On Fridays the market sold fish, bread and candles to sailors."},
    ]
    row = {
        "id": "q1",
        "question": "What did she do in the warm months?",  # no word of the evidence: its options have them
        "options": ["She grew tomatoes and basil", "She sold candles", "She logged storms", "She sailed"],
        "gold": "A",
        "documents": docs,
        "corpus": "c",
        "evidence": ["garden.md"],
    }
    path = tmp_path / "mc.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return path


def test_eval_tree_summarized_and_retrieve_methods(tmp_path: Path) -> None:
    from knowtree_eval.runner import run_eval

    data = _mc_dataset(tmp_path)
    run_eval(
        "jsonl", data, "tree,retrieve", tmp_path / "out",
        embedder="hash", progress=False, model_object=KeywordModel(), budget=30, k=1,
    )
    records = {r["method"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    # the options are part of what is searched: the garden passage comes first
    assert records["tree"]["retrieved"] == ["garden.md"] and records["tree"]["llm_calls"] == 0
    assert records["tree"]["prediction"] is None
    got = records["retrieve"]
    assert got["llm_calls"] == 1 and got["prediction"] and 0 < got["tokens_read"] <= 30
    assert got["retrieved"] == ["garden.md"] and got["metrics"]["correct"] in (0.0, 1.0)

    # an article of many chunks: the model summarizes its runs of chunks once, before the questions
    from test_eval import write_quality

    summary = run_eval(
        "quality", write_quality(tmp_path), "tree,tree-summarized", tmp_path / "q",
        embedder="hash", progress=False, model_object=KeywordModel(), budget=200,
    )
    records = [json.loads(x) for x in (tmp_path / "q" / "results.jsonl").read_text().splitlines()]
    assert all(r["llm_calls"] == 0 for r in records)
    assert summary["methods"]["tree-summarized"]["setup_calls"]["calls"] >= 1
    assert not summary["methods"]["tree"].get("setup_calls")


def test_methods_that_need_a_model_say_so_before_anything_runs(tmp_path: Path) -> None:
    from knowtree_eval.runner import run_eval

    data = _mc_dataset(tmp_path)
    for method in ("tree-summarized", "retrieve", "retrieve-summarized"):
        with pytest.raises(UserError, match=f"method {method} needs a model"):
            run_eval("jsonl", data, method, tmp_path / "none", embedder="hash", progress=False)
    assert not (tmp_path / "none").exists()
