"""Ranking issue nodes for a live query: grounding in the chunks and its roll-up
(`KBIndexes.ground` / `rank_issues`), and Algorithm 2 demoting, not dropping, a mismatched target.
Small invented data, hash embedder."""

from __future__ import annotations

import json
from pathlib import Path

import knowtree
from conftest import tiny_tv_kb
from knowtree.answer.kb import hybrid_retrieve
from knowtree.construct.kb.builder import issue_passages
from knowtree.retrieve import Passage
from knowtree.retrieve.kbindex import KBIndexes
from knowtree.store.kb import KBIssue

CHUNKS = [
    Passage("m#sound", "Sound mode: choose Standard, Optimized or Amplify for clearer voices.", doc="m"),
    Passage("m#ambient", "Ambient mode shows a wallpaper, photos or the clock on the idle screen.", doc="m"),
    Passage("m#remote", "Pair the remote: hold Back and Play for three seconds near the TV.", doc="m"),
]


def _issues() -> dict[str, KBIssue]:
    return {
        "s": KBIssue(
            "s", "parent", None, "cs", "How do I select the Standard sound mode?", {"feature": "sound"}
        ),
        "a": KBIssue("a", "parent", None, "ca", "How do I turn on ambient mode?", {"feature": "ambient"}),
        "r": KBIssue("r", "parent", None, "cr", "My remote does not pair with the TV", {"feature": "remote"}),
    }


def _index(issues: dict[str, KBIssue]) -> KBIndexes:
    idx = KBIndexes(":memory:", "t", "hash")
    idx.add("chunks", CHUNKS)
    members = {i.cluster_id: [(f"raw-{i.id}", i.title)] for i in issues.values()}
    idx.add("issues", issue_passages(list(issues.values()), members, idx.ground))
    return idx


def test_issue_grounded_in_its_chunk() -> None:
    idx = _index(_issues())
    grounding = idx.lexical("issues").get("s").meta["grounding"]  # type: ignore[union-attr]
    assert max(grounding, key=grounding.get) == "m#sound"
    assert "grounding" not in idx.lexical("issues").get("s|raw-s").meta  # type: ignore[union-attr]


def test_query_worded_like_the_manual_finds_the_grounded_issue() -> None:
    idx = _index(_issues())
    # "Amplify" and "clearer voices" are in the manual, in no issue text
    query = "amplify for clearer voices"
    with_rollup, without = dict(idx.rank_issues(query)), dict(idx.rank_issues(query, rollup=0.0))
    assert max(with_rollup, key=with_rollup.get) == "s"
    assert with_rollup["s"] > without["s"] and with_rollup["r"] == without["r"]


def test_mismatched_target_is_demoted_not_dropped() -> None:
    issues = _issues()
    idx = _index(issues)
    trace: list[dict] = []
    query = "how do I select the standard sound mode"
    got = hybrid_retrieve(query, {"feature": "ambient"}, issues, idx, k=2, trace=trace)
    assert got[0].issue.id == "a" and got[0].match == "exact"
    assert [a.issue.id for a in got] == ["a", "s"] and got[1].match == "semantic"
    assert any("discarded" in s for s in trace) and not any(s.get("step") == "fallback" for s in trace)


def test_new_documents_reground_issues(tmp_path: Path) -> None:
    inputs = tiny_tv_kb(
        tmp_path,
        [("b1", "the battery drains fast"), ("p1", "remote will not pair")],
        [("pair", "Pairing", "To pair the remote hold Back and Play.")],
    )
    more = tmp_path / "n.jsonl"
    more.write_text(
        json.dumps({"id": "bat", "title": "Battery", "text": "If the battery drains fast, charge it."}) + "\n"
    )
    with knowtree.open(tmp_path / "kb.db", model="keyword") as kt:
        kb = kt.kb("tv", embedder="hash")
        kb.build(**inputs)
        battery = next(r["id"] for r in kb.export() if "b1" in r["members"])
        assert "bat" not in kb.indexes().lexical("issues").get(battery).meta["grounding"]  # type: ignore[union-attr]
        report = kb.add(docs=str(more))
        assert any("re-grounded" in n for n in report.notes)
        assert "bat" in kb.indexes().lexical("issues").get(battery).meta["grounding"]  # type: ignore[union-attr]
        assert kb.ask("charge it", metadata="none", solve=False).issue.id == battery  # type: ignore[union-attr]
