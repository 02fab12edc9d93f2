"""QuALITY-style methods: `nav-overview` (the summarized tree's inner-node summaries, top down, shown
before the evidence, out of its budget) and the search per option every tree method makes for a
multiple-choice question (`retrieve.choices`, the rankings fused by turns)."""

from __future__ import annotations

from typing import Any

import pytest

from knowtree.retrieve import Passage
from knowtree_eval import datasets as ds
from knowtree_eval import treemethod as tm
from knowtree_eval.base import CorpusContext
from knowtree_eval.treemethod import Built, TreeMethod, corpus_tree, overview_text


def _story(n: int = 20) -> ds.Corpus:
    corpus = ds.Corpus("story")
    for i in range(n):
        corpus.add(Passage(f"p{i}", f"Paragraph {i} of the story.", doc="story"))
    return corpus


def _summarized() -> tm.CorpusTree:
    tree = corpus_tree(_story())
    nodes = []
    for n in tree.nodes:
        if not n.is_leaf:
            n = n.model_copy(
                update={"meta": n.meta.model_copy(update={"summary": f"about {n.level}:{n.id[:6]}"})}
            )
        nodes.append(n)
    return tm.CorpusTree(nodes, tree.root_id, tree.passage_of, tree.kind)


def test_overview_is_every_inner_summary_root_first_then_in_document_order() -> None:
    tree = _summarized()
    by_id = {n.id: n for n in tree.nodes}
    lines = overview_text(tree).splitlines()
    inner = [n for n in tree.nodes if not n.is_leaf]
    assert len(lines) == len(inner)
    assert lines[0] == f"- {by_id[tree.root_id].meta.summary}"
    # the runs of passages (level 1) follow their document node, in reading order
    runs = [n for n in tree.nodes if n.level == 1]
    positions = [lines.index(f"- {n.meta.summary}") for n in runs]
    assert positions == sorted(positions) and positions[0] > lines.index(
        f"- {by_id[tree.root_id].meta.summary}"
    )
    # a zero-call tree has no summaries: no overview
    assert overview_text(corpus_tree(_story())) == ""


def test_the_reader_sees_the_overview_before_the_evidence_and_pays_its_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(tm, "read_into", lambda record, client, case, text, reads: seen.update(text=text))
    method = TreeMethod(budget=100, overview=True)
    built = Built(store=None, index=None, shape=None, piece_passage={}, piece_tokens={}, kind="document")  # type: ignore[arg-type]
    built.overview, built.overview_tokens = "- the whole story", 30
    assert method.evidence_budget(built) == 70
    from knowtree.retrieve.treesearch import Evidence
    from knowtree.types import Citation
    from knowtree_eval.base import Record

    ev = Evidence(
        text="Paragraph 3.",
        score=1.0,
        node_id="n",
        citation=Citation(file="story", line_start=1, line_end=1, node_id="n"),
        tokens=5,
    )
    record = Record(case_id="q", method="nav-overview", corpus="story", question="What happens?")
    case = ds.Case(id="q", corpus="story", question="What happens?")
    method.answer_from([ev], case, None, record, 1, built)
    assert seen["text"].index("the whole story") < seen["text"].index("[1] Paragraph 3.")
    assert record.tokens_read == 35
    # without an overview the text is the evidence alone, and the budget is whole
    built.overview, built.overview_tokens = "", 0
    method.answer_from([ev], case, None, record, 1, built)
    assert seen["text"] == "[1] Paragraph 3." and record.tokens_read == 5
    assert method.evidence_budget(built) == 100


def test_fuse_takes_the_rankings_by_turns_each_piece_where_it_first_comes() -> None:
    from knowtree.retrieve.treesearch import Ranking, fuse

    main = Ranking(["a", "b", "c"], {"a": 2.0, "b": 1.0, "c": 0.5}, {"n": 1.0}, {"a": 2.0})
    other = Ranking(["c", "d", "a"], {"c": 4.0, "d": 2.0, "a": 1.0}, {"n": 4.0, "m": 2.0}, {"c": 4.0})
    fused = fuse([main, other])
    assert fused.pieces == ["a", "c", "b", "d"]  # firsts (main's first), then seconds, each piece once
    assert fused.scores == {"a": 1.0, "b": 0.5, "c": 1.0, "d": 0.5}  # best over rankings, each / its best
    assert fused.prior == {"n": 1.0, "m": 0.5}
    assert fuse([main]) is main


def test_per_option_search_reads_each_options_evidence() -> None:
    corpus = ds.Corpus("story")
    facts = ["The lighthouse keeper sang.", "A storm broke the mast.", "Nobody found the map."]
    for i in range(24):
        corpus.add(
            Passage(f"p{i}", facts[i] if i < 3 else f"Filler sentence number {i} about the sea.", doc="story")
        )
    case = ds.Case(
        id="q", question="What happened?", corpus="story", options=["keeper sang", "mast broke", "map lost"]
    )
    ctx = CorpusContext(corpus, embedder="hash")
    from knowtree.retrieve.choices import choice_queries
    from knowtree.retrieve.treesearch import fuse, rank_tree

    assert choice_queries(case.prompt()) == [
        "What happened? keeper sang",
        "What happened? mast broke",
        "What happened? map lost",
    ]
    per, plain = TreeMethod(budget=30), TreeMethod(budget=30, choices=False)
    built = per.built(ctx)
    plain._embedder = per._embedder  # the index was built (and embedded) by `per`
    found = per.search(built, case.prompt())
    read = " ".join(ev.text for ev in found.evidence)
    assert "sang" in read and "mast" in read and "map" in read
    # the ranking is the question's and each option's, by turns; without choices, the question's alone
    queries = [case.prompt(), *choice_queries(case.prompt())]
    ranks = [rank_tree(built.index, q, embedder=per.embedder, shape=built.shape) for q in queries]
    assert found.ranking.pieces == fuse(ranks).pieces
    assert plain.search(built, case.prompt()).ranking.pieces == ranks[0].pieces
