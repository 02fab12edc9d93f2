"""PostgreSQL: the tree index's postings in blocks (store/bm25_blocks.py), made from its postings of
one row each (`tree_index_terms`, the migration of branch scaleidx) by a migration step
(store/migrations.py); SQLite's FTS5 keeps its own."""

BLOCK_BITS = 12  # 4,096 row ids per block
#: the block expression the migration indexes; a query that reads blocks must repeat it
BLOCK_OF_SEG = f"(seg >> {BLOCK_BITS})"

POSTINGS_BLOCKS_PG = f"""
CREATE TABLE tree_index_postings (
    tree TEXT NOT NULL,
    term TEXT NOT NULL,
    seg BIGINT NOT NULL,
    rids BIGINT[] NOT NULL,
    tfs INTEGER[] NOT NULL,
    lens INTEGER[] NOT NULL,
    PRIMARY KEY (tree, term, seg)
);
INSERT INTO tree_index_postings (tree, term, seg, rids, tfs, lens)
    SELECT tree, term, min(rid), array_agg(rid ORDER BY rid), array_agg(tf ORDER BY rid), array_agg(len ORDER BY rid)
    FROM tree_index_terms GROUP BY tree, term, rid >> {BLOCK_BITS};
CREATE INDEX tree_index_postings_block ON tree_index_postings ({BLOCK_OF_SEG});
DROP TABLE tree_index_terms;
"""
