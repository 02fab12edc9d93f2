"""The enrich step (metadata for a zero-call tree) and the eval methods built on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import write_corpus
from knowtree.cli.app import app
from knowtree.construct.enrich import enrich_tree
from knowtree.construct.taxonomy import DEFAULT_TAXONOMY
from knowtree.core import KnowTree
from knowtree.errors import UserError
from knowtree.llm.base import Request
from knowtree.llm.client import LLMClient
from knowtree.retrieve.treeindex import TreeIndex
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


def test_enrich_keeps_summarized_nodes_and_synthesizes_their_parents_from_them() -> None:
    nodes, root = _tree()
    shown: list[tuple[str, str]] = []
    done_before = NodeMeta(summary="runs one and two", about=["Pixel"])
    nodes = [n.model_copy(update={"meta": done_before}) if n.id == "r1" else n for n in nodes]
    written: list[str] = []
    done = enrich_tree(
        nodes, root, LLMClient(FunctionModel(_replies(shown), max_concurrency=1)), DEFAULT_TAXONOMY,
        keep={"r1"}, on_meta=lambda nid, _meta: written.append(nid),
    )  # fmt: skip
    assert [kind for kind, _ in shown] == ["leaf", "leaf", "branch"]  # r1 made no call
    assert "runs one and two" in shown[-1][1]  # s1 is synthesized from r1's stored metadata
    assert "r1" not in done.metas and written == ["r2", "s2", "s1"] == list(done.metas)


# -- the enrich step on a stored tree: Tree.enrich and `knowtree enrich` -----------------------------


def _marking(word: str, where: str = "", bad: str = "") -> FunctionModel:
    """The keyword model, adding `word` to the summary of each leaf whose text has `where`, and
    replying with no JSON at all to the metadata prompts (repairs included) of a text with `bad`."""
    keyword = KeywordModel()

    def reply(request: Request) -> Any:
        text = "\n".join(m.content for m in request.messages)
        if bad and request.schema_name in ("leaf_meta", "branch_meta") and bad in text:
            return "not json at all"
        got = keyword.reply(request)
        if word and request.schema_name == "leaf_meta" and where in request.messages[-1].content:
            got["summary"] += f" {word}."
        return got

    return FunctionModel(reply, id=f"marking-{word or 'none'}-{bad or 'ok'}")


def _zero_call_tree(tmp_path: Path) -> Path:
    write_corpus(tmp_path / "docs")
    db = tmp_path / "kb.db"
    with KnowTree(db, model=KeywordModel(), summaries="none", read_env=False) as kt:
        assert kt.build([str(tmp_path / "docs")], tree="t").usage.calls == 0
    return db


def _stored(db: Path) -> dict[str, Node]:
    with KnowTree(db, read_env=False, create=False) as kt:
        return kt.store.load_nodes("t")


def test_enrich_writes_metadata_only_and_the_index_sees_it(tmp_path: Path) -> None:
    db = _zero_call_tree(tmp_path)
    before = _stored(db)
    assert not any(n.meta.summary for n in before.values())
    with KnowTree(db, model=_marking("zanzibarite", where="Falcon"), read_env=False) as kt:
        assert not TreeIndex(kt.store, "t").lexical("zanzibarite")
        report = kt.tree("t").enrich()
        assert report.enriched == len(before) == 4 and report.kept == 0 and report.fallbacks == 0
        assert report.usage.calls == 4  # three leaves and the root
        # the term only the model's summary of the launch leaf has: found at once, in that leaf
        best = max(kt.tree("t").retrieve("zanzibarite", embedder=None), key=lambda e: e.score)
        assert best.citation.file.endswith("launch.md") and "Falcon" in best.text
        runs = kt.store.runs("t")
        assert runs[0]["kind"] == "enrich" and runs[0]["status"] == "ok"
        assert runs[0]["usage"]["calls"] == 4  # type: ignore[index]
    after = _stored(db)
    assert all(n.meta.summary for n in after.values())
    for nid, node in before.items():  # nothing else changed: text, spans, children, titles
        assert after[nid].model_copy(update={"meta": node.meta}) == node
        assert after[nid].meta.title == node.meta.title


def test_enrich_re_indexes_only_the_entries_whose_metadata_changed(tmp_path: Path) -> None:
    db = _zero_call_tree(tmp_path)
    with KnowTree(db, model=_marking("quillwort"), read_env=False) as kt:
        entries = len(TreeIndex(kt.store, "t").rows)
        report = kt.tree("t").enrich(leaves=False)  # the root only: its leaves are a lowest run
        assert report.enriched == 1 and report.usage.calls == 1
        assert report.reindexed == 1 < entries  # the root's entry; every piece kept as indexed
        assert "quillwort" in kt.tree("t").root.meta.summary
        assert TreeIndex(kt.store, "t").lexical("quillwort")  # indexed, with no rebuild


def test_a_lazy_summary_written_within_the_second_of_the_build_reaches_the_index(tmp_path: Path) -> None:
    db = _zero_call_tree(tmp_path)
    with KnowTree(db, model=KeywordModel(), read_env=False) as kt:
        tree = kt.tree("t")
        assert not TreeIndex(kt.store, "t").lexical("zanzibarite")  # indexed now, as built
        leaf = next(n for n in tree.nodes.values() if n.is_leaf and "Falcon" in n.text)
        kt.store.update_node_meta("t", leaf, NodeMeta(summary="A zanzibarite launch."))  # what `lazy` does
        assert TreeIndex(kt.store, "t").lexical("zanzibarite")
        best = max(kt.tree("t").retrieve("zanzibarite", embedder=None), key=lambda e: e.score)
        assert best.node_id == leaf.id


def test_a_malformed_reply_is_counted_and_the_node_keeps_what_it_had(tmp_path: Path) -> None:
    db = _zero_call_tree(tmp_path)
    with KnowTree(db, model=_marking("", bad="Falcon"), read_env=False) as kt:
        report = kt.tree("t").enrich()
        assert report.fallbacks == 1 and report.enriched == 3  # two leaves and the root
        assert "1 malformed reply" in report.line()
    launch = next(n for n in _stored(db).values() if "Falcon" in n.text)
    assert launch.meta == NodeMeta() and "Falcon release shipped" in launch.text
    with KnowTree(db, model=KeywordModel(), read_env=False) as kt:  # run again: only that one left
        again = kt.tree("t").enrich()
        assert (again.enriched, again.kept, again.fallbacks, again.usage.calls) == (1, 3, 0, 1)
        summary = kt.tree("t").node(launch.id).meta.summary
        assert summary
    with KnowTree(db, model=_marking("", bad="Falcon"), read_env=False) as kt:  # forced, it fails again
        forced = kt.tree("t").enrich(force=True)
        assert forced.fallbacks >= 1
        assert kt.tree("t").node(launch.id).meta.summary == summary  # a stored summary is never lost


def test_a_zero_call_memory_gets_one_summary_per_run_of_messages(tmp_path: Path) -> None:
    messages = [
        {"role": ("user", "assistant")[i % 2], "content": f"Message {i}: keeper {i} fed Pixel the dog.",
         "timestamp": f"2023-05-0{1 + i // 6}T10:{i:02d}:00"}
        for i in range(18)
    ]  # fmt: skip
    with KnowTree(tmp_path / "kb.db", model=KeywordModel(), summaries="none", read_env=False) as kt:
        assert kt.memory("chat").add(messages).usage.calls == 0
        entries = len(TreeIndex(kt.store, "chat").rows)
        report = kt.tree("chat").enrich()  # a memory: its leaves (single messages) are not summarized
        nodes = kt.tree("chat").nodes
        inner = [n for n in nodes.values() if not n.is_leaf]
        assert report.enriched == len(inner) and all(n.meta.summary for n in inner)
        assert not any(n.meta.summary for n in nodes.values() if n.is_leaf)
        assert report.reindexed == len(inner) < entries  # the messages' pieces stay as indexed
        assert [m["content"] for m in kt.memory("chat").messages()] == [m["content"] for m in messages]


def _ok(cli: CliRunner, *args: str) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result.stdout


def test_enrich_command_skips_done_nodes_resumes_and_forces(tmp_path: Path) -> None:
    cli = CliRunner()
    write_corpus(tmp_path / "docs")
    db = ("--db", "kb.db")
    enrich = ("enrich", "t", *db, "--model", "keyword", "-q")
    built = _ok(cli, "build", "docs", *db, "--tree", "t", "--model", "keyword", "--summaries", "none")
    assert "0 LLM calls" in built
    # stopped by a cap after two calls (one at a time: the first two nodes): what was done is stored
    capped = cli.invoke(app, [*enrich, "--concurrency", "1", "--max-calls", "2"])
    assert capped.exit_code == 1 and "error:" in capped.stderr
    shown = json.loads(_ok(cli, "show", "t", *db, "--json"))
    assert sum(1 for n in shown["nodes"] if n["meta"]["summary"]) == 2
    # run again: the two done are kept, the rest is made
    resumed = _ok(cli, *enrich)
    assert "2 node(s) got metadata, 2 already summarized kept" in resumed and "2 LLM calls" in resumed
    assert "0 node(s) got metadata" in _ok(cli, *enrich)
    forced = json.loads(_ok(cli, *enrich, "--force", "--json"))
    assert forced["enriched"] == 4 and forced["usage"]["calls"] == 0 and forced["usage"]["cached"] == 4
    ledger = _ok(cli, "ledger", *db)
    assert ledger.count("enrich") == 4
    # an unknown tree: the error every command gives
    missing = cli.invoke(app, ["enrich", "nope", *db, "--model", "keyword"])
    shown_missing = cli.invoke(app, ["show", "nope", *db])
    assert missing.exit_code == shown_missing.exit_code == 1
    assert missing.stderr == shown_missing.stderr and "no tree named 'nope'" in missing.stderr


def test_an_enrich_estimated_above_confirm_calls_asks_first_and_a_refusal_calls_nothing(tmp_path: Path) -> None:
    from knowtree.construct.enrich import estimate_enrich, plan

    db = _zero_call_tree(tmp_path)
    nodes = _stored(db)
    root = next(n.id for n in nodes.values() if n.kind is NodeKind.ROOT)
    estimate = estimate_enrich(nodes, plan(nodes, root, leaves=True, root=True), leaves=True, kept=0, tree="t")
    assert estimate.calls == 4 and estimate.action == "enrich" and "4 node(s) of tree 't'" in estimate.line()
    seen: list[Any] = []
    with KnowTree(db, model=KeywordModel(), confirm_calls=3, read_env=False) as kt:
        with pytest.raises(UserError, match="enrich not started: this enrich will make about 4 model calls"):
            kt.tree("t").enrich(confirm=lambda e: seen.append(e) or False)
        assert len(seen) == 1 and all(r["kind"] != "enrich" for r in kt.store.runs("t"))  # no run, no call
        assert not any(n.meta.summary for n in kt.tree("t").nodes.values())
        report = kt.tree("t").enrich(confirm=lambda e: True)
        assert report.usage.calls == estimate.calls == 4  # the estimate counts the calls made
        # the second time the four are kept: nothing to confirm, nothing to call
        again = kt.tree("t").enrich(confirm=lambda e: seen.append(e) or False)
        assert again.usage.calls == 0 and len(seen) == 1
    # one summary per run of small leaves (as made: r1, r2, s2, then s1), the root when asked, and
    # every leaf when asked: the estimate counts the calls `enrich_tree` makes in each case
    small, small_root = _tree()
    by_id = {n.id: n for n in small}
    for leaves, root_too in ((False, False), (False, True), (True, True)):
        client = LLMClient(FunctionModel(_replies([]), max_concurrency=1))
        made = enrich_tree(small, small_root, client, DEFAULT_TAXONOMY, leaves=leaves, root=root_too)
        levels = plan(by_id, small_root, leaves=leaves, root=root_too)
        assert estimate_enrich(by_id, levels, leaves=leaves, kept=0, tree="m").calls == made.usage.calls


def test_enrich_command_refuses_a_large_enrich_without_a_terminal_unless_yes(tmp_path: Path) -> None:
    cli = CliRunner()
    write_corpus(tmp_path / "docs")
    db = ("--db", "kb.db")
    _ok(cli, "build", "docs", *db, "--tree", "t", "--model", "keyword", "--summaries", "none")
    env = {"KNOWTREE_CONFIRM_CALLS": "2"}
    refused = cli.invoke(app, ["enrich", "t", *db, "--model", "keyword", "-q"], env=env)
    assert refused.exit_code == 1 and "this enrich will make about 4 model calls" in refused.stderr
    assert "--yes" in refused.stderr and "Traceback" not in refused.stderr
    shown = json.loads(_ok(cli, "show", "t", *db, "--json"))
    assert not any(n["meta"]["summary"] for n in shown["nodes"])  # nothing called, nothing written
    done = cli.invoke(app, ["enrich", "t", *db, "--model", "keyword", "-q", "--yes"], env=env)
    assert done.exit_code == 0 and "4 node(s) got metadata" in done.stdout


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
        "quality", write_quality(tmp_path), "tree,tree-summarized,nav-summarized,nav-overview,nav-options,closed-book", tmp_path / "q",
        embedder="hash", progress=False, model_object=KeywordModel(), budget=200,
    )
    records = [json.loads(x) for x in (tmp_path / "q" / "results.jsonl").read_text().splitlines()]
    assert all(r["llm_calls"] == 0 for r in records if r["method"] in ("tree", "tree-summarized"))
    assert summary["methods"]["tree-summarized"]["setup_calls"]["calls"] >= 1
    assert not summary["methods"]["tree"].get("setup_calls")
    # nav over the summarized tree: the same summaries (from the cache), then its judge and answer calls
    nav = [r for r in records if r["method"] == "nav-summarized"]
    assert nav and all(r["llm_calls"] >= 2 and r["prediction"] and r["error"] is None for r in nav)
    assert summary["methods"]["nav-summarized"]["setup_calls"] == {"calls": 0, "cached": 1, "tokens": 0}
    # nav-overview: the same tree, its summaries shown before the evidence, their tokens out of the budget
    over = {r["case_id"]: r for r in records if r["method"] == "nav-overview"}
    assert over and all(r["prediction"] and r["error"] is None for r in over.values())
    assert all(r["tokens_read"] > 0 for r in over.values())
    # nav-options: a search per option, then the same judge and answer calls as nav
    per = [r for r in records if r["method"] == "nav-options"]
    assert per and all(r["llm_calls"] >= 2 and r["prediction"] and r["error"] is None for r in per)
    # closed-book: answered from nothing
    closed = [r for r in records if r["method"] == "closed-book"]
    assert closed and all(r["tokens_read"] == 0 and r["llm_calls"] >= 1 for r in closed)


def test_methods_that_need_a_model_say_so_before_anything_runs(tmp_path: Path) -> None:
    from knowtree_eval.runner import run_eval

    data = _mc_dataset(tmp_path)
    for method in ("tree-summarized", "retrieve", "retrieve-summarized", "nav-summarized", "nav-overview"):
        with pytest.raises(UserError, match=f"method {method} needs a model"):
            run_eval("jsonl", data, method, tmp_path / "none", embedder="hash", progress=False)
    assert not (tmp_path / "none").exists()


class _InProcessFanout:
    """`RayFanout`'s contract without Ray: each level's calls made by `leaf_meta` / `branch_meta` on
    another client over the same model, results in reverse order (a cluster returns them in any)."""

    def __init__(self, client: LLMClient) -> None:
        self.client = client
        self.batches: list[tuple[str, int]] = []

    def leaves(self, items: Any, taxonomy: Any) -> Any:
        from knowtree.construct.builder import leaf_meta

        self.batches.append(("leaves", len(items)))
        return [(i, *leaf_meta(self.client, text, taxonomy)) for i, text in reversed(list(items))]

    def branches(self, items: Any) -> Any:
        from knowtree.construct.builder import branch_meta

        self.batches.append(("branches", len(items)))
        return [(i, *branch_meta(self.client, metas)) for i, metas in reversed(list(items))]


def _by_text(request: Request) -> Any:
    """A reply that depends on the prompt only (not on the order calls arrive in)."""
    text = request.messages[-1].content
    if "about" in (request.schema_ or {}).get("properties", {}):
        return {"summary": f"leaf {len(text)} {text[-40:]}", "content_types": ["chat"], "critical_actions": [],
                "decisions": [], "noteworthy_events": [], "about": ["Pixel" if "Pixel" in text else "lakes"]}
    return {"summary": f"branch {len(text)}", "critical_actions": [], "decisions": [], "noteworthy_events": []}


@pytest.mark.parametrize("leaves", [False, True])
def test_enrich_through_a_fanout_makes_the_metadata_this_process_makes(leaves: bool) -> None:
    nodes, root = _tree()
    here = enrich_tree(nodes, root, LLMClient(FunctionModel(_by_text)), DEFAULT_TAXONOMY, leaves=leaves, root=True)
    fanout = _InProcessFanout(LLMClient(FunctionModel(_by_text)))
    written: list[str] = []
    there = enrich_tree(
        nodes, root, LLMClient(FunctionModel(_by_text)), DEFAULT_TAXONOMY, leaves=leaves, root=True,
        fanout=fanout, on_meta=lambda nid, _m: written.append(nid),
    )
    assert there.metas == here.metas and there.fallbacks == 0 and sorted(written) == sorted(here.metas)
    assert fanout.batches and all(n > 0 for _, n in fanout.batches)  # the calls went through the fanout


def test_a_malformed_reply_through_a_fanout_is_counted_and_stored_nowhere() -> None:
    nodes, root = _tree()
    fanout = _InProcessFanout(LLMClient(FunctionModel(_replies([], bad="I paint lakes."))))
    done = enrich_tree(nodes, root, LLMClient(FunctionModel(_replies([]))), DEFAULT_TAXONOMY, fanout=fanout)
    assert done.fallbacks == 1 and "r2" not in done.metas and "s1" in done.metas
