"""The tree as an index: contextual entries, scoring and roll-up, packing, incremental re-indexing,
`Tree.retrieve`, `Memory.context`, `--mode retrieve` / `--no-answer`, and the eval method `tree`."""

from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import knowtree.retrieve.indexsync as indexsync
import knowtree.retrieve.treeindex as treeindex
from conftest import CORPUS, count_node_loads, write_corpus
from knowtree.cli.app import app
from knowtree.core import KnowTree
from knowtree.retrieve.context import split_pieces, tree_entries
from knowtree.retrieve.embed import HashEmbedder
from knowtree.retrieve.treeindex import TreeIndex
from knowtree.retrieve.treescore import ScoreParams, TreeShape, leaf_scores, pack, rank, rollup
from knowtree.store import migrations
from knowtree.store.migrations import MIGRATIONS
from knowtree.store.portable import dialect_of
from knowtree.testing.models import FunctionModel, KeywordModel
from knowtree.types import Node, NodeKind, NodeMeta, Span


def _no_model(request: Any) -> Any:
    raise AssertionError(f"no model call expected, got {request.schema_name}")


# -- scoring -------------------------------------------------------------------------------------


def _shape() -> TreeShape:
    #        root
    #      /      \
    #     A        B
    #   a1 a2 a3   b1 b2
    parent = {"A": "root", "B": "root", "root": None}
    leaves = ["a1", "a2", "a3", "b1", "b2"]
    parent.update({leaf: leaf[0].upper() for leaf in leaves})
    return TreeShape(parent=parent, leaves=leaves)


def test_rollup_is_sum_over_sqrt_n_plus_one() -> None:
    own = {"a1": 0.5, "a2": 0.5, "a3": 0.5, "b1": 0.9, "b2": 0.0}
    r = rollup(_shape(), own)
    assert r["A"] == pytest.approx(1.5 / math.sqrt(4))
    assert r["B"] == pytest.approx(0.9 / math.sqrt(3))
    assert r["root"] == pytest.approx(2.4 / math.sqrt(6))


def test_a_leaf_borrows_from_its_branch_and_ties_keep_document_order() -> None:
    shape = _shape()
    own = {"a1": 0.4, "a2": 0.6, "a3": 0.6, "b1": 0.45, "b2": 0.0}
    flat = leaf_scores(shape, own, ScoreParams(parent_weight=0.0))
    assert rank(flat, shape)[:3] == ["a2", "a3", "b1"]
    smoothed = leaf_scores(shape, own, ScoreParams(parent_weight=0.5, inner_entries=False))
    # branch A holds three matching leaves: a1 overtakes the lone b1
    assert smoothed["a1"] > smoothed["b1"]
    assert rank(smoothed, shape)[:3] == ["a2", "a3", "a1"]


def test_pack_respects_the_budget_merges_neighbours_in_document_order() -> None:
    shape = _shape()
    scores = {"b1": 0.9, "a2": 0.8, "a1": 0.7, "b2": 0.6, "a3": 0.5}
    tokens = {leaf: 10 for leaf in shape.leaves}
    groups = pack(rank(scores, shape), tokens, 35, shape, scores)
    assert [g.leaves for g in groups] == [["a1", "a2"], ["b1"]]  # b2 would pass 35 tokens
    assert sum(g.tokens for g in groups) <= 35
    assert groups[0].score == 0.8
    assert pack(rank(scores, shape), tokens, 5, shape, scores) == []


# -- entries ---------------------------------------------------------------------------------------


def test_pieces_cover_the_text_within_the_size() -> None:
    text = "Line one is short.\n" + "A sentence that goes on. " * 40 + "\nLast line.\n"
    pieces = split_pieces(text, 120)
    assert all(len(p) <= 240 for _, p in pieces)
    assert "".join(p for _, p in pieces).replace(" ", "") == text.replace(" ", "")
    assert all(text[o : o + len(p)] == p for o, p in pieces)


def _section_tree() -> tuple[dict[str, Node], str]:
    span = Span(file="report.pdf", start=0, end=10, line_start=1, line_end=3, page_start=4, page_end=5)
    leaf = Node(
        id="leaf1",
        kind=NodeKind.LEAF,
        level=0,
        meta=NodeMeta(title="Cash flows"),
        text="Purchases of property and equipment 1,577\nDepreciation 1,488\n",
        spans=[span],
    )
    section = Node(
        id="sec1",
        kind=NodeKind.BRANCH,
        level=1,
        meta=NodeMeta(title="Financial statements", summary="The audited statements of 2018."),
        children=["leaf1"],
        spans=[span],
    )
    root = Node(
        id="root", kind=NodeKind.ROOT, level=2, meta=NodeMeta(title="3M 2018 10-K"), children=["sec1"]
    )
    return {"leaf1": leaf, "sec1": section, "root": root}, "root"


def test_a_piece_is_indexed_with_its_breadcrumb_and_pages_its_ancestor_with_summary_and_text() -> None:
    nodes, root = _section_tree()
    entries = {e.id: e for e in tree_entries(nodes, root)}
    piece = entries["leaf1:0"]
    assert piece.leaf and piece.parent == "sec1"  # a one-piece leaf: the piece takes its place
    assert "3M 2018 10-K > Financial statements > Cash flows" in piece.context
    assert "pages 4-5" in piece.context
    # the section's summary is in the section's own entry (with the words below it), not in the piece
    assert "audited statements" not in piece.context
    section = entries["sec1"]
    assert section.parent == "root" and not section.leaf
    assert "The audited statements of 2018." in section.text and "Depreciation 1,488" in section.text
    assert piece.cite["page_start"] == 4 and piece.cite["line_start"] == 1


def test_a_summarized_ancestor_without_a_title_adds_nothing_to_its_pieces() -> None:
    nodes, root = _section_tree()
    untitled = nodes["sec1"].model_copy(update={"meta": NodeMeta(summary="The audited statements of 2018.")})
    entries = {e.id: e for e in tree_entries({**nodes, "sec1": untitled}, root)}
    assert entries["leaf1:0"].context.splitlines()[0] == "3M 2018 10-K > Cash flows"
    assert "audited" not in entries["leaf1:0"].context


# -- the index in the store ---------------------------------------------------------------------------


class CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(64)
        self.embedded = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.embedded += len(texts)
        return super().embed(texts)


def _rows(kt: KnowTree, tree: str) -> dict[str, tuple[int, str, str]]:
    rows = kt.store.read(
        lambda c: c.execute(
            "SELECT id, rid, hash, body_hash FROM tree_index WHERE tree = ?", (tree,)
        ).fetchall()
    )
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def test_an_edit_reindexes_and_reembeds_only_the_changed_entries(tmp_path: Path) -> None:
    paths = write_corpus(tmp_path / "docs")
    with KnowTree(tmp_path / "kb.db", model=FunctionModel(_no_model, id="none"), summaries="none") as kt:
        kt.build(paths, tree="t")
        before = _rows(kt, "t")
        assert before
        emb = CountingEmbedder()
        TreeIndex(kt.store, "t").vectors(emb)
        assert emb.embedded == len(before)
        Path(paths[1]).write_text(CORPUS["launch.md"].replace("Lisbon", "Porto"), encoding="utf-8")
        kt.build(paths, tree="t")
        after = _rows(kt, "t")
        # a row whose text did not change keeps its row number (and FTS row, postings); only new text is indexed
        kept = [i for i in after if i in before and after[i][0] == before[i][0]]
        new_text = {after[i][2] for i in after} - {before[i][2] for i in before}
        assert kept and new_text
        rewritten = {i for i in after if i not in before or after[i][2] != before[i][2]}
        assert set(after) - set(kept) == rewritten  # new node ids or new text, nothing else
        emb.embedded = 0
        TreeIndex(kt.store, "t").vectors(emb)
        assert emb.embedded == len(new_text)  # only text that changed is embedded again
        hits = kt.tree("t").retrieve("Where did the launch happen?", budget_tokens=200, embedder=emb)
        _fts_consistent(kt)
    assert "Porto" in hits[0].text or any("Porto" in h.text for h in hits)


def _not_derived(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("entries derived again for a tree that did not change")


def _index_writes(statements: Sequence[str]) -> list[str]:
    """The statements that wrote entries, FTS rows or vectors of the tree index."""
    tables = ("tree_index ", "tree_index(", "tree_index_fts", "tree_index_vec")
    return [
        s
        for s in statements
        if s.split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE", "REPLACE")
        and any(t in s for t in tables)
    ]


def _traced(kt: KnowTree) -> bool:
    return dialect_of(kt.store) == "sqlite"


def _trace(kt: KnowTree, callback: Any) -> None:
    """SQLite's statement trace (PostgreSQL's connections have none: a no-op there)."""
    if _traced(kt):
        kt.store.write(lambda c: c.set_trace_callback(callback))


def test_a_rebuild_that_changes_nothing_writes_no_index_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = write_corpus(tmp_path / "docs")
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        kt.build(paths, tree="t")
        before = _rows(kt, "t")
        TreeIndex(kt.store, "t").vectors(HashEmbedder())
        statements: list[str] = []
        derived = indexsync.tree_entries
        monkeypatch.setattr(indexsync, "tree_entries", _not_derived)  # the fingerprint says unchanged
        _trace(kt, statements.append)
        try:
            kt.build(paths, tree="t")  # same files, same (cached) model answers: same nodes
            index = TreeIndex(kt.store, "t")  # and the next reader finds it current
        finally:
            _trace(kt, None)
        if _traced(kt):  # SQLite shows every statement; on PostgreSQL the row numbers below tell
            assert any("INSERT INTO nodes" in s for s in statements)  # the tree itself was saved again
            assert _index_writes(statements) == []
        assert index.last_sync is None  # no re-sync on read either
        assert _rows(kt, "t") == before
        monkeypatch.setattr(indexsync, "tree_entries", derived)
        # one changed file: entries are derived and written again, only for what changed
        Path(paths[1]).write_text(CORPUS["launch.md"].replace("Lisbon", "Porto"), encoding="utf-8")
        statements.clear()
        _trace(kt, statements.append)
        try:
            kt.build(paths, tree="t")
        finally:
            _trace(kt, None)
        assert _index_writes(statements) or not _traced(kt)
        assert _rows(kt, "t") != before
        _fts_consistent(kt)


def _fts_consistent(kt: KnowTree) -> None:
    """The full-text index holds exactly the entries' current text. SQLite: every (term, row, offset)
    of the FTS5 table equals a fresh index's over `tree_index.body` (external content: SQLite's own
    integrity-check does not compare). PostgreSQL: the BM25 postings, lengths, document frequencies
    and sizes (store/bm25_pg.py) equal those counted afresh from the entries."""
    if dialect_of(kt.store) == "postgresql":
        kt.store.read(_postings_consistent)
        return

    def instances(c: Any) -> tuple[list[tuple], list[tuple]]:
        c.execute(
            "CREATE VIRTUAL TABLE temp.fresh_fts USING fts5(body,"
            " tokenize = 'porter unicode61 remove_diacritics 2')"
        )
        c.execute("INSERT INTO temp.fresh_fts(rowid, body) SELECT rid, body FROM tree_index")
        c.execute("CREATE VIRTUAL TABLE temp.kept_v USING fts5vocab(main, tree_index_fts, instance)")
        c.execute("CREATE VIRTUAL TABLE temp.fresh_v USING fts5vocab(temp, fresh_fts, instance)")
        try:
            kept = c.execute("SELECT term, doc, offset FROM temp.kept_v ORDER BY 1, 2, 3").fetchall()
            fresh = c.execute("SELECT term, doc, offset FROM temp.fresh_v ORDER BY 1, 2, 3").fetchall()
        finally:
            for table in ("kept_v", "fresh_v", "fresh_fts"):
                c.execute(f"DROP TABLE temp.{table}")
        return kept, fresh

    kept, fresh = kt.store.write(instances)
    assert kept == fresh and kept


def _postings_consistent(c: Any) -> None:
    from knowtree.store.bm25_pg import count_terms

    rows = c.execute("SELECT tree, rid, context, text, toklen FROM tree_index").fetchall()
    counted = count_terms([f"{r[2]}\n{r[3]}" if r[2] else r[3] for r in rows])
    assert [r[4] for r in rows] == [n for _, n in counted]
    fresh = sorted(
        (r[0], term, r[1], tf, n) for r, (terms, n) in zip(rows, counted, strict=True) for term, tf in terms.items()
    )
    postings = (
        "SELECT b.tree, b.term, u.rid, u.tf, u.len FROM tree_index_postings b,"
        " unnest(b.rids, b.tfs, b.lens) AS u(rid, tf, len)"
    )
    assert sorted(c.execute(postings).fetchall()) == fresh and fresh
    df = Counter((tree, term) for tree, term, *_ in fresh)
    assert dict(((t, w), n) for t, w, n in c.execute("SELECT tree, term, docs FROM tree_index_df WHERE docs <> 0")) == df
    sizes: dict[str, list[int]] = {}
    for r, (_, n) in zip(rows, counted, strict=True):
        sizes.setdefault(r[0], [0, 0])
        sizes[r[0]][0] += 1
        sizes[r[0]][1] += n
    kept = c.execute("SELECT tree, entries, tokens FROM tree_index_stats WHERE entries <> 0").fetchall()
    assert {t: [int(e), int(k)] for t, e, k in kept} == sizes


def _index_table(kt: KnowTree, tree: str) -> list[tuple]:
    """Every indexed entry's derived content (not its rowid or reuse key)."""
    return kt.store.read(
        lambda c: c.execute(
            "SELECT id, node, parent, leaf, ord, hash, body_hash, text, context, cite_json FROM tree_index"
            " WHERE tree = ? ORDER BY id",
            (tree,),
        ).fetchall()
    )


def _derived_afresh(kt: KnowTree, tree: str) -> list[tuple]:
    """The entries a from-scratch derivation gives (in a transaction rolled back)."""

    class Rollback(Exception):
        pass

    got: list[list[tuple]] = []

    def fresh(c: Any) -> None:
        treeindex.drop_entries(c, tree)
        report = treeindex.sync_entries(c, tree)
        assert report.reused == 0 and report.written == report.entries
        got.append(_index_table_on(c, tree))
        raise Rollback

    with pytest.raises(Rollback):
        kt.store.write(fresh)
    return got[0]


def _index_table_on(c: Any, tree: str) -> list[tuple]:
    return c.execute(
        "SELECT id, node, parent, leaf, ord, hash, body_hash, text, context, cite_json FROM tree_index"
        " WHERE tree = ? ORDER BY id",
        (tree,),
    ).fetchall()


def test_an_update_derives_only_changed_leaves_and_equals_a_fresh_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = write_corpus(tmp_path / "docs")
    reports: list[treeindex.SyncReport] = []
    original = treeindex.sync_entries

    def spy(c: Any, tree: str, nodes: Any = None) -> treeindex.SyncReport:
        reports.append(original(c, tree, nodes))
        return reports[-1]

    monkeypatch.setattr(treeindex, "sync_entries", spy)  # the store's hook looks it up at each save
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:  # summaries: contexts depend on them
        kt.build(paths, tree="t")
        Path(paths[1]).write_text(CORPUS["launch.md"] + "\nThe crowd cheered in Porto.\n", encoding="utf-8")
        kt.build(paths, tree="t")
        assert _index_table(kt, "t") == _derived_afresh(kt, "t")
        _fts_consistent(kt)
        hits = kt.tree("t").retrieve("Where did the crowd cheer?", budget_tokens=200, embedder="hash")
        assert any("Porto" in h.text for h in hits)
        Path(paths[1]).write_text(CORPUS["launch.md"], encoding="utf-8")  # back as it was
        reports.clear()
        kt.build(paths, tree="t")
        report = reports[0]
        assert report.reused > 0  # the other documents' leaves were not derived again
        assert report.written < report.entries
        assert _index_table(kt, "t") == _derived_afresh(kt, "t")
        _fts_consistent(kt)


def test_a_memory_update_reuses_the_indexed_messages(tmp_path: Path) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        mem = kt.memory("chat")
        talk = [
            {"role": "user", "name": "Ann" if i % 2 else "Bob", "content": f"Message {i} about plan {i % 7}."}
            for i in range(310)
        ]
        mem.add(talk[:300])  # an add syncs its index (and writes its vectors) before it returns
        first = kt.tree_index("chat").last_sync
        assert first is not None and first.reused == 0 and first.entries
        mem.add(talk[300:])
        again = kt.tree_index("chat").last_sync
        assert again is not None and again.reused > 0 and again.written < again.entries
        assert kt.store.write(lambda c: treeindex.sync_entries(c, "chat")).unchanged
        assert _index_table(kt, "chat") == _derived_afresh(kt, "chat")
        _fts_consistent(kt)


_OLD_LAYOUT = """
CREATE TABLE old_index AS SELECT tree, id, node, parent, leaf, ord, hash, body_hash, text, context, cite_json
    FROM tree_index ORDER BY rid;
CREATE TABLE old_state AS SELECT tree, signature, entries, updated FROM tree_index_state;
DROP TABLE tree_index_fts;
DROP TABLE tree_index;
DROP TABLE tree_index_state;
CREATE TABLE tree_index (tree TEXT NOT NULL, id TEXT NOT NULL, node TEXT NOT NULL, parent TEXT,
    leaf INTEGER NOT NULL, ord INTEGER NOT NULL, hash TEXT NOT NULL, body_hash TEXT NOT NULL,
    text TEXT NOT NULL, context TEXT NOT NULL, cite_json TEXT NOT NULL DEFAULT '{}', PRIMARY KEY (tree, id));
INSERT INTO tree_index SELECT * FROM old_index;
CREATE VIRTUAL TABLE tree_index_fts USING fts5(
    tree UNINDEXED, id UNINDEXED, body, tokenize = 'porter unicode61 remove_diacritics 2');
INSERT INTO tree_index_fts(rowid, tree, id, body) SELECT rowid, tree, id,
    CASE WHEN context = '' THEN text ELSE context || char(10) || text END FROM tree_index;
CREATE TABLE tree_index_state (tree TEXT PRIMARY KEY, signature TEXT NOT NULL, entries INTEGER NOT NULL,
    updated TEXT NOT NULL);
INSERT INTO tree_index_state SELECT * FROM old_state;
DROP TABLE old_index;
DROP TABLE old_state
"""


@pytest.mark.sqlite_only
def test_an_index_saved_before_the_incremental_layout_migrates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database whose tree index predates migrations 11-12 (FTS rows holding their own text, no
    `rid`, `src` or fingerprint) keeps its entries and answers the same after the upgrade."""

    paths = write_corpus(tmp_path / "docs")
    question = "Who approved the marketing budget?"
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        kt.build(paths, tree="t")
        entries = _index_table(kt, "t")
        lexical = TreeIndex(kt.store, "t").lexical(question)
        evidence = kt.tree("t").retrieve(question, budget_tokens=120, embedder="hash")
    conn = sqlite3.connect(tmp_path / "kb.db", isolation_level=None)
    conn.executescript(_OLD_LAYOUT)
    # rewound to just before those two; the migrations appended after them are in the file already,
    # so only those two are replayed
    rewound = next(i for i, m in enumerate(MIGRATIONS) if "tree_index_state ADD COLUMN content" in str(m))
    conn.execute(f"PRAGMA user_version = {rewound}")
    conn.close()
    # and the leaf counts' migration, which rewrites the tree index's table too
    counts = [m for m in MIGRATIONS if "tree_index ADD COLUMN leaves" in getattr(m, "sqlite", m)]
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS[: rewound + 2] + counts)
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        assert _index_table(kt, "t") == entries
        _fts_consistent(kt)
        index = TreeIndex(kt.store, "t")
        assert index.lexical(question) == lexical
        again = kt.tree("t").retrieve(question, budget_tokens=120, embedder="hash")
        assert [(e.node_id, e.text, e.score) for e in again] == [
            (e.node_id, e.text, e.score) for e in evidence
        ]
        Path(paths[1]).write_text(CORPUS["launch.md"].replace("Lisbon", "Porto"), encoding="utf-8")
        kt.build(paths, tree="t")  # the first save after the upgrade derives afresh (no keys yet)
        assert _index_table(kt, "t") == _derived_afresh(kt, "t")
        _fts_consistent(kt)


def test_tree_retrieve_finds_cited_evidence_with_no_model_call(tmp_path: Path) -> None:
    paths = write_corpus(tmp_path / "docs")
    with KnowTree(tmp_path / "kb.db", model=FunctionModel(_no_model, id="none"), summaries="none") as kt:
        report = kt.build(paths, tree="t")
        assert report.usage.calls == 0  # the zero-call chunk tree
        evidence = kt.tree("t").retrieve(
            "Who approved the marketing budget?", budget_tokens=80, embedder="hash"
        )
    assert evidence and sum(e.tokens for e in evidence) <= 80
    best = max(evidence, key=lambda e: e.score)
    assert "Alice Chen approved" in best.text
    assert (
        best.citation.file.endswith("budget.md") and best.citation.line_start <= 4 <= best.citation.line_end
    )
    assert best.path[-1] == best.node_id


# -- memories -------------------------------------------------------------------------------------


def test_memory_context_without_a_model_uses_the_index(tmp_path: Path) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        mem = kt.memory("chat")
        mem.embedder = "hash"
        stamp = "10:00 am on 1 May, 2023"
        mem.add(
            [
                {
                    "role": "user",
                    "name": "Ann",
                    "content": f"Note {i} about the garden plans.",
                    "timestamp": stamp,
                }
                for i in range(12)
            ]
            + [
                {
                    "role": "user",
                    "name": "Ann",
                    "content": "My sister Beth moved to Lisbon.",
                    "timestamp": stamp,
                }
            ]
        )
        ctx = mem.context("Where did Beth move?", budget_tokens=30, use_model=False)
        evidence = kt.tree("chat").retrieve("Where did Beth move?", budget_tokens=30, embedder="hash")
        answer = kt.tree("chat").ask("Where did Beth move?", mode="retrieve", budget_tokens=60)
    assert answer.status == "complete" and "Lisbon" in (answer.answer or "")
    assert answer.citations[0].line_start == 13 and answer.trace[0].outcome.startswith("retrieve:")
    assert any("Lisbon" in str(m["content"]) for m in ctx)
    assert [m["position"] for m in ctx] == sorted(m["position"] for m in ctx)
    assert all(m["via"] == "index" and "score" in m for m in ctx)
    assert any("Lisbon" in e.text and e.citation.line_start == 13 for e in evidence)  # message 13


# -- the command line --------------------------------------------------------------------------------


def test_ask_mode_retrieve_and_no_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path / "docs")
    cli = CliRunner()

    def ok(*args: str) -> str:
        result = cli.invoke(app, list(args))
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        return result.stdout

    ok(
        "build",
        "docs",
        "--db",
        "kb.db",
        "--tree",
        "t",
        "--model",
        "keyword",
        "--summaries",
        "none",
        "--quiet",
    )
    q = "Which database did the platform team choose?"
    shown = ok("ask", "t", q, "--db", "kb.db", "--mode", "retrieve", "--no-answer", "--budget", "60")
    assert "PostgreSQL" in shown and "database.md" in shown and "score" in shown
    as_json = json.loads(ok("ask", "t", q, "--db", "kb.db", "--mode", "retrieve", "--no-answer", "--json"))
    assert as_json[0]["citation"]["file"].endswith(".md")
    answered = json.loads(
        ok("ask", "t", q, "--db", "kb.db", "--model", "keyword", "--mode", "retrieve", "--json")
    )
    assert answered["status"] == "complete" and "PostgreSQL" in answered["answer"]
    assert answered["usage"]["calls"] + answered["usage"]["cached"] == 1  # one answer call
    assert answered["citations"][0]["file"].endswith("database.md")
    bad = cli.invoke(app, ["ask", "t", q, "--db", "kb.db", "--mode", "walk", "--no-answer"])
    assert bad.exit_code == 2


# -- the eval method ----------------------------------------------------------------------------------


def test_eval_method_tree_reports_budget_hits_beside_bm25(tmp_path: Path) -> None:
    from knowtree_eval.runner import run_eval

    data = tmp_path / "q.jsonl"
    docs = [{"id": n, "text": t} for n, t in CORPUS.items()]
    rows = [
        {
            "id": "q1",
            "question": "Who approved the marketing budget?",
            "documents": docs,
            "corpus": "c",
            "evidence": ["budget.md"],
        },
        {"id": "q2", "question": "Where did the launch happen?", "corpus": "c", "evidence": ["launch.md"]},
    ]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    summary = run_eval("jsonl", data, "bm25,tree", tmp_path / "out", embedder="hash", progress=False)
    tree = summary["methods"]["tree"]
    assert tree["hit_by_budget"][256] == 1.0 and tree["all_hit_by_budget"][256] == 1.0
    assert "all_hit_by_budget" in summary["methods"]["bm25"]
    assert tree["setup_calls"] == {} and tree["llm_calls"] == 0


def test_a_slow_embedder_scores_only_the_candidates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import knowtree.retrieve.treeindex as treeindex

    monkeypatch.setattr(treeindex, "PROBE", 1)
    paths = write_corpus(tmp_path / "docs")
    with KnowTree(tmp_path / "kb.db", model=FunctionModel(_no_model, id="none"), summaries="none") as kt:
        kt.build(paths, tree="t")
        index = TreeIndex(kt.store, "t")
        first = index.rows[0].id
        emb = CountingEmbedder()
        scores = index.dense("budget", emb, candidates=[first], max_seconds=0.0)
        assert set(scores) == {first} and emb.embedded <= 3  # probe, candidate, question
        assert set(index.dense("budget", emb)) == {r.id for r in index.rows}  # no limit: every entry


def test_embed_index_embeds_what_is_missing_once_and_the_next_search_only_the_question(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(treeindex, "PROBE", 1)
    paths = write_corpus(tmp_path / "docs")
    with KnowTree(tmp_path / "kb.db", model=FunctionModel(_no_model, id="none"), summaries="none") as kt:
        kt.build(paths, tree="t")
        emb = CountingEmbedder()
        entries = len(kt.tree_index("t").rows)
        assert kt.embed_index("t", emb) == entries and emb.embedded == entries
        emb.embedded = 0
        assert kt.embed_index("t", emb) == entries and emb.embedded == 0  # stored and kept
        stored = kt.store.read(lambda c: c.execute(
            "SELECT count(*) FROM tree_index_vec WHERE tree = 't' AND embedder = ?", (emb.id,)).fetchone()[0])
        assert stored == entries
        hits = kt.tree("t").retrieve("Where did the launch happen?", budget_tokens=200, embedder=emb)
        assert hits and emb.embedded == 1  # the question; every entry's vector was there
        Path(paths[1]).write_text(CORPUS["launch.md"].replace("Lisbon", "Porto"), encoding="utf-8")
        kt.build(paths, tree="t")
        emb.embedded = 0
        assert kt.embed_index("t", emb) == len(kt.tree_index("t").rows) and 0 < emb.embedded < entries
        assert kt.embed_index("t", None) == 0  # BM25 only: nothing to embed


def test_a_zero_call_memory_is_retrievable_at_once(tmp_path: Path) -> None:
    stamp = "10:00 am on 1 May, 2023"
    msgs = [
        {"role": "user", "name": "Ann", "content": f"Note {i} about the garden plans.", "timestamp": stamp}
        for i in range(20)
    ] + [{"role": "user", "name": "Ann", "content": "My sister Beth moved to Lisbon.", "timestamp": stamp}]
    with KnowTree(tmp_path / "kb.db", model=FunctionModel(_no_model, id="none"), summaries="none") as kt:
        mem = kt.memory("chat")
        mem.embedder = "hash"
        report = mem.add(msgs)
        assert report.usage.calls == 0 and report.fallbacks == 0 and report.nodes > len(msgs)
        ctx = mem.context("Where did Beth move?", budget_tokens=30, use_model=False)
        titles = [n.meta.title for n in kt.tree("chat").nodes.values() if not n.is_leaf]
    assert any("Lisbon" in str(m["content"]) for m in ctx)
    assert any(t.startswith("messages ") for t in titles)


def test_a_pdf_collection_is_retrieved_by_page_with_its_documents_metadata(tmp_path: Path) -> None:
    from pdf_maker import make_pdf, with_outline

    pdfs = []
    for name, company, revenue in (("alpha", "Alpha Corp", 5), ("beta", "Beta Inc", 9)):
        plain = make_pdf(
            tmp_path / f"{name}-plain.pdf",
            [[f"{company} annual report"], [f"Revenue was {revenue} million dollars.", "Costs rose."]],
        )
        pdfs.append(with_outline(plain, tmp_path / f"{name}.pdf", [("Report", 1, 1), ("Results", 1, 2)]))
    with KnowTree(
        tmp_path / "kb.db", model=FunctionModel(_no_model, id="none"), summaries="none", describe=False
    ) as kt:
        kt.build([str(pdfs[0])], tree="c", meta={"company": "Alpha"})
        kt.build([str(pdfs[1])], tree="c", add=True, meta={"company": "Beta"})
        evidence = kt.tree("c").retrieve("What was Beta's revenue?", budget_tokens=20, embedder="hash")
        contexts = [r.context for r in TreeIndex(kt.store, "c").rows if r.leaf]
    best = max(evidence, key=lambda e: e.score)
    c = best.citation
    assert c.file.endswith("beta.pdf") and c.page_start is not None and c.page_start <= 2 <= (c.page_end or 0)
    assert "9 million" in best.text and "report\nRevenue" in best.text  # neighbouring pages merged
    assert any("company: Beta" in x and "beta.pdf > Report" in x for x in contexts)  # metadata, breadcrumb


def test_removing_a_tree_removes_its_index(tmp_path: Path) -> None:
    paths = write_corpus(tmp_path / "docs")
    with KnowTree(tmp_path / "kb.db", model=FunctionModel(_no_model, id="none"), summaries="none") as kt:
        kt.build(paths, tree="t")
        kt.build(paths[:1], tree="u")
        assert _rows(kt, "t") and _rows(kt, "u")
        kt.store.delete_tree("t")
        assert not _rows(kt, "t") and _rows(kt, "u")
        derived = (
            ("tree_index_fts",)
            if dialect_of(kt.store) == "sqlite"
            else ("tree_index_postings", "tree_index_df", "tree_index_stats")
        )
        tables = (*derived, "tree_index_vec", "tree_index_state")
        left = kt.store.read(
            lambda c: [c.execute(f"SELECT count(*) FROM {table} WHERE tree = 't'").fetchone()[0] for table in tables]
        )
        assert left == [0] * len(tables)
        _fts_consistent(kt)
        assert TreeIndex(kt.store, "u").lexical("launch budget")


def test_chat_add_with_no_summaries_then_retrieve_from_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    lines = [
        {"role": "user", "name": "Ann", "content": f"Note {i} about the garden.", "timestamp": "1 May 2023"}
        for i in range(10)
    ] + [{"role": "user", "name": "Ann", "content": "Beth moved to Lisbon.", "timestamp": "2 May 2023"}]
    (tmp_path / "chat.jsonl").write_text("\n".join(json.dumps(m) for m in lines) + "\n", encoding="utf-8")
    cli = CliRunner()
    added = cli.invoke(
        app,
        [
            "chat",
            "add",
            "mem",
            "chat.jsonl",
            "--db",
            "kb.db",
            "--model",
            "keyword",
            "--summaries",
            "none",
            "--json",
        ],
    )
    assert added.exit_code == 0, (added.stdout, added.exception)
    assert json.loads(added.stdout)["usage"]["calls"] == 0
    shown = cli.invoke(
        app, ["ask", "mem", "Where did Beth move?", "--db", "kb.db", "--mode", "retrieve", "--no-answer"]
    )
    assert shown.exit_code == 0 and "Lisbon" in shown.stdout and "mem:11" in shown.stdout


# -- a question asking for several facts ---------------------------------------------------------------


def test_retrieve_answers_each_part_of_a_question_from_its_own_evidence(tmp_path: Path) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        kt.build(write_corpus(tmp_path / "docs"), tree="t")
        answer = kt.tree("t").ask("Who approved the marketing budget and when did the launch happen?", mode="retrieve")
    assert answer.status == "complete"
    assert "Alice Chen" in (answer.answer or "") and "September 14" in (answer.answer or "")
    assert [(c.file.rsplit("/", 1)[-1], c.line_start) for c in answer.citations] == [("budget.md", 4), ("launch.md", 4)]
    assert answer.trace[0].action == "decompose" and [p["status"] for p in answer.parts] == ["complete"] * 2
    assert sum(s.outcome.startswith("retrieve:") for s in answer.trace) == 2  # each part its own evidence
    assert answer.usage.calls == 3  # the split, then one answer call per part


def test_a_part_the_tree_cannot_answer_makes_the_answer_partial_and_says_which(tmp_path: Path) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        kt.build(write_corpus(tmp_path / "docs"), tree="t")
        q = "Who approved the marketing budget and what is the airspeed of an unladen swallow?"
        answer = kt.tree("t").ask(q, mode="retrieve")
        simple = kt.tree("t").ask("Who approved the marketing budget?", mode="retrieve")
    assert answer.status == "partial" and "Alice Chen" in (answer.answer or "")
    assert "[not found: what is the airspeed of an unladen swallow?]" in (answer.answer or "")
    assert [c.file.rsplit("/", 1)[-1] for c in answer.citations] == ["budget.md"]
    assert [p["status"] for p in answer.parts] == ["complete", "none"]
    assert simple.status == "complete" and all(s.action != "decompose" for s in simple.trace)  # no split call
    assert simple.usage.calls + simple.usage.cached == 1


def test_a_verified_quote_that_is_not_verbatim_is_cited_at_its_own_lines(tmp_path: Path) -> None:
    """The 1.5B model merges and rewords lines when it quotes; the answer step accepts a quote most of
    whose words are there, and the citation names the lines where it matches, not the whole evidence."""
    lines = [f"Line {i} is about the weather and nothing else." for i in range(1, 6)]
    lines += ["The team chose PostgreSQL as the database because the export is", "relational, and backups stay in one place."]
    lines += [f"Line {i} is about lunch and nothing else." for i in range(8, 13)]
    (tmp_path / "notes.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    keyword = KeywordModel()

    def model(request: Any) -> Any:
        if request.schema_name == "search_answer":
            quote = "The team chose PostgreSQL as the database since the export is relational and backups stay in one place."
            return {"found": True, "source": 1, "quote": quote, "answer": "PostgreSQL"}
        return keyword.reply(request)

    with KnowTree(tmp_path / "kb.db", model=FunctionModel(model, id="m"), summaries="none") as kt:
        kt.build([str(tmp_path / "notes.md")], tree="t")
        answer = kt.tree("t").ask("Which database did the team choose?", mode="retrieve")
    assert answer.status == "complete"
    (c,) = answer.citations
    assert (c.line_start, c.line_end) == (6, 7)  # not the evidence's lines 1-12
    # the trace's answer step names the same leaf and place, not the evidence item's range
    read = answer.trace[-1]
    assert read.action == "read" and read.outcome == f"complete (source 1, {c.file}:6-7)", read.outcome
    assert read.node_id == c.node_id and read.choice == read.options[0]  # source 1 of those shown


def test_asking_from_the_index_reads_only_the_evidence_nodes_and_answers_as_the_whole_tree_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """auto, retrieve and nav load the evidence's leaves and the root, not the tree (a server answering
    from a large tree paid for loading every node on every question)."""
    files = dict(CORPUS)
    files.update(
        {f"menu{i}.md": f"# Menu {i}\n\nThe cafeteria serves soup number {i} and bread on week {i}.\n" for i in range(30)}
    )
    asked = [
        ("Who approved the marketing budget?", None),  # auto: a chunk tree is answered from its index
        ("When did the launch happen?", "retrieve"),
        ("Who approved the marketing budget and when did the launch happen?", "retrieve"),
        ("Who approved the marketing budget?", "nav"),
    ]
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        kt.build(write_corpus(tmp_path / "docs", files), tree="t")
        everything = len(kt.store.load_nodes("t"))
        loaded = count_node_loads(monkeypatch, kt.store)
        light = [kt.tree("t").ask(q, mode=m, budget_tokens=120) for q, m in asked]
        assert loaded and max(loaded) < everything / 3
        full = []
        for q, m in asked:  # the reference: the same questions over the tree loaded whole
            tree = kt.tree("t")
            assert len(tree.nodes) == everything
            full.append(tree.ask(q, mode=m, budget_tokens=120))

    def seen(a: Any) -> Any:  # what the answer says and cites and how it was found, not what it cost
        cost = {"tokens", "latency_s", "cached"}
        return a.model_dump(exclude={"usage": True, "trace": {"__all__": cost}})

    assert [seen(a) for a in light] == [seen(a) for a in full]
    assert all(a.status == "complete" and a.citations for a in light)
    assert "Alice Chen" in (light[0].answer or "") and "September 14" in (light[1].answer or "")


def test_the_index_is_read_once_and_replaced_when_its_tree_changes_here_or_in_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = write_corpus(tmp_path / "docs")
    reads: list[str] = []
    real_rows = TreeIndex.rows.fget
    assert real_rows is not None

    def counted(self: TreeIndex) -> Any:
        if self._rows is None:
            reads.append(self.tree)
        return real_rows(self)

    monkeypatch.setattr(TreeIndex, "rows", property(counted))
    q = "Where did the launch happen?"
    with KnowTree(tmp_path / "kb.db", model=KeywordModel(), summaries="none") as kt:
        kt.build(paths, tree="t")
        first = kt.tree("t").retrieve(q, budget_tokens=200, embedder="hash")
        again = [kt.tree("t").retrieve(q, budget_tokens=200, embedder="hash") for _ in range(3)]
        kt.tree("t").ask(q, mode="retrieve", budget_tokens=200)
        assert reads == ["t"] and all(a == first for a in again)  # read once for every question
        # an edit here: the next search reads the new index
        Path(paths[1]).write_text(CORPUS["launch.md"].replace("Lisbon", "Porto"), encoding="utf-8")
        kt.build(paths, tree="t")
        edited = kt.tree("t").retrieve(q, budget_tokens=200, embedder="hash")
        assert reads == ["t", "t"] and any("Porto" in e.text for e in edited)
        assert not any("Lisbon" in e.text for e in edited)
        # metadata written later (same nodes, same count, the same second): its context is indexed
        tree = kt.tree("t")
        leaf = next(n for n in tree.nodes.values() if n.is_leaf and "Porto" in n.text)
        kt.store.update_node_meta("t", leaf, leaf.meta.model_copy(update={"title": "Harbour relocation memo"}))
        titled = kt.tree("t").retrieve("harbour relocation memo", budget_tokens=200, embedder="hash")
        assert "Porto" in max(titled, key=lambda e: e.score).text and len(reads) == 3
        # another process (a CLI beside a server) changes the tree: this one sees it
        with KnowTree(tmp_path / "kb.db", model=KeywordModel(), summaries="none") as other:
            Path(paths[1]).write_text(CORPUS["launch.md"].replace("Lisbon", "Madeira"), encoding="utf-8")
            other.build(paths, tree="t")
        moved = kt.tree("t").retrieve(q, budget_tokens=200, embedder="hash")
        assert any("Madeira" in e.text for e in moved) and not any("Porto" in e.text for e in moved)
