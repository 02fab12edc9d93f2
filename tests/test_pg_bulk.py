"""Issue 36 (branch pgbuild): a PostgreSQL save writes the tree index in bulk — entries, postings and
vectors COPYed batch by batch (vectors in pgvector's binary format), the next batch embedded while
one is written. What arrives that way is what the row-by-row writes stored: the same rows, postings,
statistics and vectors whatever the batch size, every vector exact in pgvector, names and texts with
COPY's special characters intact, and no batch larger than asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowtree.core import KnowTree
from knowtree.retrieve import indexsync, indexwrite
from knowtree.store import pgbulk
from knowtree.testing.models import KeywordModel
from test_scale_index import _tickets


def _build(url: str, paths: list[str], tree: str) -> None:
    with KnowTree(url, model=KeywordModel(), summaries="none", structure="headings") as kt:
        kt.build(paths, tree=tree)


def _dump(url: str, tree: str) -> dict[str, Any]:
    """The tree's index as stored, without row ids (postings named by entry id)."""
    import psycopg

    with psycopg.connect(url) as conn:

        def rows(sql: str) -> list[tuple]:
            return sorted(conn.execute(sql, (tree,)).fetchall())

        return {
            "entries": rows(
                "SELECT id, node, parent, leaf, ord, hash, body_hash, text, context, cite_json, src, toklen, leaves"
                " FROM tree_index WHERE tree = %s"
            ),
            "postings": rows(
                "SELECT t.id, p.term, p.tf, p.len FROM (SELECT b.tree, b.term, u.rid, u.tf, u.len"
                " FROM tree_index_postings b, unnest(b.rids, b.tfs, b.lens) AS u(rid, tf, len)) p"
                " JOIN tree_index t ON t.rid = p.rid WHERE p.tree = %s"
            ),
            "df": rows("SELECT term, docs FROM tree_index_df WHERE tree = %s"),
            "stats": rows("SELECT entries, tokens FROM tree_index_stats WHERE tree = %s"),
            "vectors": rows("SELECT id, embedder, hash, vec, emb::text FROM tree_index_vec WHERE tree = %s"),
            "order": [r[0] for r in conn.execute("SELECT id FROM tree_index WHERE tree = %s ORDER BY rid", (tree,))],
        }


def test_small_batches_store_what_one_batch_stores(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _tickets(tmp_path / "docs", 90, files=3)
    _build(pg_url, paths, "whole")
    whole = _dump(pg_url, "whole")
    monkeypatch.setattr(pgbulk, "BATCH", 7)
    real = indexwrite.write_entries
    monkeypatch.setattr(indexsync, "write_entries", lambda c, t, rows, e: real(c, t, rows, e, 7))
    _build(pg_url, paths, "batched")
    batched = _dump(pg_url, "batched")
    assert whole["entries"] and whole["postings"] and whole["vectors"]
    assert len(whole["vectors"]) == len(whole["entries"])  # every entry got its vector in the save
    for key in ("entries", "postings", "df", "stats", "vectors"):
        assert batched[key] == whole[key], key
    # stored order (FTS5's ties: by rid) is the derivation's, whatever the batches
    assert batched["order"] == whole["order"]


def test_every_vector_reaches_pgvector_exactly(pg_url: str, tmp_path: Path) -> None:
    _build(pg_url, _tickets(tmp_path / "docs", 30, files=2), "t")
    vectors = _dump(pg_url, "t")["vectors"]
    assert vectors
    for _, _, _, vec, emb in vectors:
        stored = np.frombuffer(bytes(vec), dtype=np.float32)
        assert np.array_equal(np.array(emb.strip("[]").split(","), dtype=np.float32), stored)


def test_copy_keeps_special_characters_of_names_and_texts(pg_url: str, tmp_path: Path) -> None:
    name = "back\\slash\ttab"
    doc = tmp_path / "odd.md"
    doc.write_text(
        "# Odd\n\n## One\n\nA path C:\\temp\\new holds zebra\tfiles.\n\n## Two\n\nPlain words about llamas.\n",
        encoding="utf-8",
    )
    _build(pg_url, [str(doc)], name)
    dump = _dump(pg_url, name)
    assert any("C:\\temp\\new holds zebra" in r[7] for r in dump["entries"])
    assert ("zebra",) in {(t,) for t, _ in dump["df"]}
    with KnowTree(pg_url, model=KeywordModel()) as kt:
        hits = kt.tree(name).retrieve("zebra", budget_tokens=60)
    assert hits and "zebra" in hits[0].text


def test_the_save_writes_and_embeds_in_bounded_batches(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No COPY of entry rows and no embedding call holds more than a batch (the old save sent every
    row in one statement and embedded every text before writing one vector)."""
    from knowtree.store import pgconn

    monkeypatch.setattr(pgbulk, "BATCH", 20)
    copied: list[int] = []
    real_copy = pgconn.Connection.copy_rows

    def counting_copy(self: Any, table: str, columns: Any, rows: Any) -> None:
        rows = list(rows)
        if table == "tree_index":
            copied.append(len(rows))
        real_copy(self, table, columns, rows)

    monkeypatch.setattr(pgconn.Connection, "copy_rows", counting_copy)
    embedded: list[int] = []
    real_embed = indexwrite.embed_entries

    def counting_embed(embedder: Any, contexts: Any, texts: Any, batch: int = indexwrite.JOINED_BATCH) -> Any:
        embedded.append(len(texts))
        return real_embed(embedder, contexts, texts, batch)

    monkeypatch.setattr(indexwrite, "embed_entries", counting_embed)
    real_write = indexwrite.write_entries
    monkeypatch.setattr(indexsync, "write_entries", lambda c, t, rows, e: real_write(c, t, rows, e, 20))
    _build(pg_url, _tickets(tmp_path / "docs", 120, files=3), "t")
    entries = len(_dump(pg_url, "t")["entries"])
    assert entries > 100
    assert copied and max(copied) <= 20 and sum(copied) == entries
    assert embedded and max(embedded) <= 20 and sum(embedded) == entries
