"""PostgreSQL-only migration steps of the tree index's tables (store/migrations.py): its postings in
blocks (store/bm25_blocks.py), made from its postings of one row each (`tree_index_terms`, the
migration of branch scaleidx; SQLite's FTS5 keeps its own), and the layout of its rows."""

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

#: branch pgvec: a row of `tree_index_vec` holding its vector twice (`vec` bytes, `emb`) is over the
#: ~2 KB at which PostgreSQL cuts a row, and TOAST moved out the largest value first: `emb`, the one
#: the HNSW search and `cosines` read (each read a second lookup). Now `emb` stays in the row (MAIN)
#: and `vec` (the exact path's, `db copy`'s) goes out, uncompressed (EXTERNAL). Rows written from now.
VECTOR_ROW_PG = "ALTER TABLE tree_index_vec ALTER COLUMN emb SET STORAGE MAIN, ALTER COLUMN vec SET STORAGE EXTERNAL;"

#: branch pgvec: `tree_index.body` (context, newline, text: a generated column) is SQLite's FTS5
#: external content; PostgreSQL's postings are cut from the texts the client holds, and nothing
#: reads it there. It doubled the entries' text on disk (185 -> 111 MB at 10^5 entries) and the
#: work of writing them (INSERT 3.8-5.1 -> 2.2 s). Derived data: dropping it removes nothing stored.
ENTRY_BODY_PG = "ALTER TABLE tree_index DROP COLUMN body;"
