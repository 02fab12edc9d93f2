"""The tree index's postings on PostgreSQL in blocks of row ids (store/bm25_blocks.py): a block row
per term and aligned block, read back as the postings of one row each; writes that cross a block's
edge, removals from both sides of it, and the migration from one row a posting."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

pytest.importorskip("psycopg")

WORDS = "budget launch review ticket owner deploy cache index invoice region".split()
TEXTS = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(5 + i % 4)) for i in range(40)]
UNNESTED = (
    "SELECT b.tree, b.term, u.rid, u.tf, u.len FROM tree_index_postings b,"
    " unnest(b.rids, b.tfs, b.lens) AS u(rid, tf, len)"
)
QUERIES = (["budget", "owner"], ["invoice"], ["ctx", "deploy", "region"], ["cache", "index", "ticket"])


def _rows(tree: str, keep: set[int] | None = None) -> list[tuple]:
    return [
        (tree, f"e{i}", f"n{i}", None, 1, i, f"h{i}", f"b{i}", t, "ctx" if i % 2 else "", "{}", "")
        for i, t in enumerate(TEXTS)
        if keep is None or i in keep
    ]


def _expected(c: Any, tree: str) -> tuple[list[tuple], Counter[str]]:
    """The postings and document frequencies that `tree`'s entry rows make, counted afresh."""
    from knowtree.store.bm25_pg import count_terms

    rows = c.execute("SELECT rid, context, text FROM tree_index WHERE tree = ?", (tree,)).fetchall()
    counted = count_terms([f"{r[1]}\n{r[2]}" if r[1] else r[2] for r in rows])
    postings = sorted(
        (tree, term, r[0], tf, n) for r, (terms, n) in zip(rows, counted, strict=True) for term, tf in terms.items()
    )
    return postings, Counter(term for _, term, *_ in postings)


def _stored(c: Any, tree: str) -> tuple[list[tuple], Counter[str]]:
    postings = sorted(c.execute(f"SELECT * FROM ({UNNESTED}) p WHERE p.tree = ?", (tree,)).fetchall())
    df = Counter(dict(c.execute("SELECT term, docs FROM tree_index_df WHERE tree = ? AND docs <> 0", (tree,))))
    return [tuple(p) for p in postings], df


def _ranking(c: Any, tree: str) -> list[list[str]]:
    from knowtree.store import treeindex_pg

    return [[i for i, _ in treeindex_pg.lexical(c, tree, q, 10)] for q in QUERIES]


def test_postings_across_a_blocks_edge_read_and_rank_as_within_one(pg_url: str) -> None:
    from knowtree.retrieve.indexwrite import write_entries
    from knowtree.store import PostgresStore, treeindex_pg
    from knowtree.store.bm25_blocks import BLOCK_BITS

    store = PostgresStore(pg_url)
    try:
        with store.transaction() as c:
            treeindex_pg.insert_entries(c, _rows("low"))  # row ids 1-40: one block
            edge = (1 << BLOCK_BITS) - 12
            c.execute("SELECT setval(pg_get_serial_sequence('tree_index', 'rid'), ?)", (edge,))
            write_entries(c, "high", _rows("high"), None, batch=7)  # 4085-4124: two blocks, a batch across
        with store.transaction() as c:
            segs = c.execute("SELECT seg, rids FROM tree_index_postings WHERE tree = 'high'").fetchall()
            assert {s >> BLOCK_BITS for s, _ in segs} == {0, 1}
            assert all(len({r >> BLOCK_BITS for r in rids}) == 1 and min(rids) == s for s, rids in segs)
            for tree in ("low", "high"):
                assert _stored(c, tree) == _expected(c, tree) and _stored(c, tree)[0]
            assert _ranking(c, "low") == _ranking(c, "high") and any(_ranking(c, "low"))
    finally:
        store.close()


def test_removing_entries_from_both_sides_of_an_edge_leaves_what_a_fresh_write_of_the_rest_makes(
    pg_url: str,
) -> None:
    from knowtree.store import PostgresStore, treeindex_pg
    from knowtree.store.bm25_blocks import BLOCK_BITS

    gone = {0, 3, 13, 14, 15, 16, 30}  # row ids on both sides of the edge, and a term's last holders
    later = {39}  # then one on the far side alone: found by its block, not by its row's first id
    keep = set(range(len(TEXTS))) - gone - later
    store = PostgresStore(pg_url)
    try:
        with store.transaction() as c:
            c.execute("SELECT setval(pg_get_serial_sequence('tree_index', 'rid'), ?)", ((1 << BLOCK_BITS) - 15,))
            treeindex_pg.insert_entries(c, _rows("t"))
            treeindex_pg.insert_entries(c, _rows("fresh", keep))
            rids = [r for (r,) in c.execute(
                "SELECT rid FROM tree_index WHERE tree = 't' AND ord = ANY(?::int[])", (sorted(gone),)
            ).fetchall()]
            assert {r >> BLOCK_BITS for r in rids} == {0, 1}
            treeindex_pg.delete_entries(c, rids)
            (last,) = c.execute("SELECT rid FROM tree_index WHERE tree = 't' AND ord = ?", (max(later),)).fetchone()
            assert last >> BLOCK_BITS == 1
            treeindex_pg.delete_entries(c, [last])
        with store.transaction() as c:
            assert _stored(c, "t") == _expected(c, "t")
            assert c.execute("SELECT count(*) FROM tree_index_postings WHERE cardinality(rids) = 0").fetchone()[0] == 0
            assert c.execute(
                "SELECT entries, tokens FROM tree_index_stats WHERE tree = 't'"
            ).fetchone() == c.execute("SELECT entries, tokens FROM tree_index_stats WHERE tree = 'fresh'").fetchone()
            assert _ranking(c, "t") == _ranking(c, "fresh") and any(_ranking(c, "t"))
    finally:
        store.close()


def test_the_migration_moves_postings_of_one_row_each_into_blocks(pg_url: str) -> None:
    import psycopg

    from knowtree.store.migrations import split_script
    from knowtree.store.migrations_postings import POSTINGS_BLOCKS_PG

    old = [("t", "alpha", 5, 1, 3), ("t", "alpha", 4095, 2, 4), ("t", "alpha", 4096, 1, 9), ("t", "beta", 5, 2, 3),
           ("u", "alpha", 7, 1, 1)]  # fmt: skip
    with psycopg.connect(pg_url) as conn:
        conn.execute("DROP TABLE tree_index_postings")
        conn.execute(
            "CREATE TABLE tree_index_terms (tree TEXT NOT NULL, term TEXT NOT NULL, rid BIGINT NOT NULL,"
            " tf INTEGER NOT NULL, len INTEGER NOT NULL, PRIMARY KEY (tree, term, rid))"
        )
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO tree_index_terms VALUES (%s, %s, %s, %s, %s)", old)
        for statement in split_script(POSTINGS_BLOCKS_PG):
            conn.execute(statement)
        blocks = conn.execute("SELECT tree, term, seg, rids, tfs, lens FROM tree_index_postings ORDER BY 1, 2, 3").fetchall()
        assert blocks == [
            ("t", "alpha", 5, [5, 4095], [1, 2], [3, 4]),
            ("t", "alpha", 4096, [4096], [1], [9]),
            ("t", "beta", 5, [5], [2], [3]),
            ("u", "alpha", 7, [7], [1], [1]),
        ]
        assert conn.execute("SELECT to_regclass('tree_index_terms')").fetchone() == (None,)
