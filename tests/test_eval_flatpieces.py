"""The same-unit flat baselines (`flat-*`): they rank the tree's own pieces, not whole passages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from knowtree.retrieve import Passage
from knowtree.retrieve.embed import get_embedder
from knowtree_eval import datasets as ds
from knowtree_eval import methods as em
from knowtree_eval.flatpieces import SIGNALS, FlatPiecesMethod, corpus_pieces, method_name, minmax
from knowtree_eval.runner import run_eval
from knowtree_eval.treemethod import TreeMethod

FILLER = (
    "The committee reviewed routine matters of the period. Staff prepared the usual schedules. "
    "Nothing unusual was noted in the ordinary course of business. "
)
FACT = "Net revenue from widget licensing was 4,821 million dollars. "


def _page(n: int, fact: bool = False) -> str:
    body = FILLER * 8  # ~1,250 characters: a page is ~320 tokens, four ~400-character pieces
    return body[:800] + (FACT if fact else "") + body[800:] + f" (page {n})"


def _filings() -> ds.Corpus:
    """Two paged filings (FinanceBench's shape): the same words on every page but one of ACME's."""
    corpus = ds.Corpus("filings")
    for doc in ("ACME_2020_10K", "GLOBEX_2021_10K"):
        for n in range(6):
            text = _page(n, fact=(doc == "ACME_2020_10K" and n == 3))
            corpus.add(Passage(f"{doc}#{n}", text, doc=doc, meta={"page": n}))
    return corpus


def _case(question: str, evidence: list[str]) -> ds.Case:
    return ds.Case(id="q", question=question, corpus="filings", evidence=evidence)


def test_flat_methods_rank_the_trees_own_pieces() -> None:
    ctx = em.CorpusContext(_filings(), embedder="hash")
    pieces = corpus_pieces(ctx)
    built = TreeMethod(use_dense=False).built(ctx)
    leaves = [r for r in built.index.rows if r.leaf]
    # exactly the tree's leaf entries: same ids, same shown text, same context, same order
    assert pieces.ids == [r.id for r in leaves]
    assert pieces.text == [r.text for r in leaves] and pieces.context == [r.context for r in leaves]
    assert len(pieces.ids) > len(ctx.corpus.passages) * 3  # pages were cut into pieces
    assert max(len(t) for t in pieces.text) <= 450
    assert all("page" in c for c in pieces.context)
    assert corpus_pieces(ctx) is pieces  # built once per corpus, shared by every flat method
    built.store.close()
    ctx.close()


@pytest.mark.parametrize("name", [method_name(s, c) for s in SIGNALS for c in (False, True)])
def test_a_page_too_long_for_the_budget_is_still_found_by_its_piece(name: str) -> None:
    # the evidence page is ~320 tokens: a ranking of whole pages shows nothing within 256 tokens
    ctx = em.CorpusContext(_filings(), embedder="hash")
    page = "ACME_2020_10K#3"
    assert ctx.tokens(ctx.corpus.text(page)) > 256
    method = em.make_method(name, em.MethodParams(k=3, budget=256))
    method.prepare(ctx)  # type: ignore[attr-defined]
    record = method.run(_case("What was net revenue from widget licensing?", [page]), ctx)
    assert record.method == name
    assert record.metrics["hit_b256"] == 1.0
    assert record.retrieved[0] == page
    assert 0 < record.tokens_read <= 3 * 115  # three pieces shown, not three pages
    pages = em.make_method("bm25", em.MethodParams(k=3, budget=256)).run(
        _case("What was net revenue from widget licensing?", [page]), ctx
    )
    assert pages.retrieved[0] == page and pages.metrics["hit_b256"] == 0.0  # what ranking pages gives
    ctx.close()


def test_the_context_variant_indexes_the_entrys_context() -> None:
    # both filings have the same words on page 0; only the context says which company it is
    ctx = em.CorpusContext(_filings(), embedder="hash")
    case = _case("GLOBEX routine schedules committee", ["GLOBEX_2021_10K"])
    plain = FlatPiecesMethod("bm25", False, k=1).run(case, ctx)
    with_context = FlatPiecesMethod("bm25", True, k=1).run(case, ctx)
    assert plain.retrieved[0].startswith("ACME")  # a tie: the first in document order
    assert with_context.retrieved[0].startswith("GLOBEX")
    assert with_context.metrics["hit_rate"] == 1.0 and plain.metrics["hit_rate"] == 0.0
    ctx.close()


def test_fused_and_rrf_scores_by_hand() -> None:
    ctx = em.CorpusContext(_filings(), embedder="hash")
    pieces = corpus_pieces(ctx)
    question = "net revenue widget licensing"
    embedder = get_embedder("hash")
    cosine = pieces.matrix(embedder, True) @ embedder.embed([question])[0]
    lexical = dict(pieces.bm25(True).search(question, len(pieces.ids)))
    best = max(lexical.values())
    fused = FlatPiecesMethod("fused", True).scores(pieces, question, ctx)
    dense = minmax(cosine)
    for i in range(len(pieces.ids)):
        expected = 0.3 * lexical.get(str(i), 0.0) / best + 0.7 * dense[i]
        assert fused[i] == pytest.approx(expected)
    rrf = FlatPiecesMethod("rrf", True).scores(pieces, question, ctx)
    lex_rank = sorted(lexical, key=lambda i: -lexical[i])
    dense_rank = list(np.argsort(-cosine, kind="stable"))
    for i in range(len(pieces.ids)):
        expected = 1 / (61 + dense_rank.index(i))
        if str(i) in lexical:
            expected += 1 / (61 + lex_rank.index(str(i)))
        assert rrf[i] == pytest.approx(expected)
    ctx.close()


def test_every_flat_method_is_registered_and_reported_beside_tree(tmp_path: Path) -> None:
    names = [method_name(s, c) for s in SIGNALS for c in (False, True)]
    assert set(names) <= set(em.available_methods())
    paragraphs = [
        ("Widget", [FILLER * 3, FACT]),
        ("Gadget", [FILLER * 4]),
        ("Sprocket", [FILLER * 2, "Sprockets are sold in boxes of twelve. "]),
    ]
    data = [
        {
            "_id": "h1",
            "question": "What was net revenue from widget licensing?",
            "answer": "4,821 million dollars",
            "context": [[t, s] for t, s in paragraphs],
            "supporting_facts": [["Widget", 1]],
        }
    ]
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    summary = run_eval(
        "hotpotqa", path, ["tree", *names], tmp_path / "out", progress=False, embedder="hash", budget=256
    )
    assert set(summary["methods"]) == {"tree", *names}
    for name in names:
        assert summary["methods"][name]["hit_by_budget"][256] == 1.0
    written = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert set(written["methods"]) == {"tree", *names}
    assert written["methods"]["flat-fused-ctx"]["all_hit_by_budget"]["256"] == 1.0


def test_an_unknown_signal_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown flat signal"):
        FlatPiecesMethod("tfidf")
