"""The tree index's BM25 postings on PostgreSQL in blocks: one row per (key, term, block of row ids)
holding the block's row ids, term counts and row lengths as three parallel arrays, instead of one
row per (term, row). store/bm25_pg.py's functions take this layout for a `Postings` whose `blocks`
is set (the tree index's `tree_index_postings`); the flat passage indexes keep one row a posting.

Why: a tree's save wrote ~60 posting rows per entry (70 M rows and two B-trees at 10⁶ leaves, two
thirds of the bytes it wrote), each with a 24-byte tuple header, its key's text and an index entry
twice. A block row carries ~16 bytes a posting and one index entry per block.

A block is the row ids that share `rid >> BLOCK_BITS` (aligned, so the block of any row id is known
without a lookup: removing entries reads only their blocks' rows, through the `(seg >> BLOCK_BITS)`
index). A row's `seg` is the smallest row id it was written with, unique for its (key, term) since
row ids never repeat, so every write is a plain COPY: a later write into the same aligned block
(another batch of the same save, a later `add`) is a row of its own, and a query reads them all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import groupby
from typing import Any

from knowtree.store.migrations_postings import BLOCK_BITS, BLOCK_OF_SEG  # the schema's block

_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})

Block = tuple[str, int, list[int], list[int], list[int]]  # term, seg, rids, tfs, lens


def copy_text(value: str) -> str:
    """`value` as a field of COPY's text format (backslash, tab, newline and return escaped)."""
    return value.translate(_COPY_ESCAPES)


def block_line(term: str, seg: str, ids: Sequence[str], tfs: Sequence[str], lens: Sequence[str]) -> str:
    """A block row as a line of COPY's text format without its key column (`copy_lines`' columns:
    term, seg, rids, tfs, lens), from its term (escaped already: `copy_text`) and its numbers as text."""
    return f"{term}\t{seg}\t{{{','.join(ids)}}}\t{{{','.join(tfs)}}}\t{{{','.join(lens)}}}\n"


def blocks_of_counts(rids: Sequence[int], counted: Sequence[tuple[Counter[str], int]]) -> list[Block]:
    """Rows' (term counts, length) (`bm25_pg.count_terms`) as block rows, in term then row id order."""
    postings = sorted(
        (term, rid, tf, length)
        for rid, (terms, length) in zip(rids, counted, strict=True)
        for term, tf in terms.items()
    )
    out: list[Block] = []
    for (term, _), group in groupby(postings, key=lambda x: (x[0], x[1] >> BLOCK_BITS)):
        rows = list(group)
        out.append((term, rows[0][1], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]))
    return out


def copy_lines(conn: Any, table: str, key_column: str, key: str, lines: Sequence[tuple[str, str, int]]) -> Counter[str]:
    """COPY `fts_terms.cut_blocks`' lines as block rows of `key`; returns {term: rows of `key` holding it}."""
    docs: Counter[str] = Counter()
    prefix = copy_text(key) + "\t"
    sql = f"COPY {table} ({key_column}, term, seg, rids, tfs, lens) FROM STDIN"
    with conn.raw.cursor() as cur, cur.copy(sql) as copy:
        for start in range(0, len(lines), 5000):
            part = lines[start : start + 5000]
            copy.write("".join(prefix + line for _, line, _ in part))
            for term, _, n in part:
                docs[term] += n
    return docs


def copy_blocks(conn: Any, table: str, key_column: str, key: str, blocks: Sequence[Block]) -> Counter[str]:
    """COPY block rows of `key` (`copy_lines` of their lines, printed here); returns {term: rows of
    `key` holding it}."""
    lines = [
        (term, block_line(copy_text(term), str(seg), *(list(map(str, v)) for v in (ids, tfs, lens))), len(ids))
        for term, seg, ids, tfs, lens in blocks
    ]
    return copy_lines(conn, table, key_column, key, lines)


def remove_from_blocks(conn: Any, table: str, key_column: str, rids: Sequence[int]) -> dict[str, Counter[str]]:
    """Take `rids` out of the block rows holding them (a row left empty is deleted); returns
    {key: {term: rows removed holding it}} for the document frequencies."""
    gone = set(rids)
    if not gone:
        return {}
    found = conn.execute(
        f"SELECT {key_column}, term, seg, rids, tfs, lens FROM {table}"
        f" WHERE {BLOCK_OF_SEG} = ANY(?::bigint[]) AND rids && ?::bigint[]",
        (sorted({r >> BLOCK_BITS for r in gone}), sorted(gone)),
    ).fetchall()
    removed: dict[str, Counter[str]] = {}
    emptied: list[tuple[str, str, int]] = []
    kept: list[tuple[list[int], list[int], list[int], str, str, int]] = []
    for key, term, seg, ids, tfs, lens in found:
        keep = [i for i, r in enumerate(ids) if r not in gone]
        removed.setdefault(key, Counter())[term] += len(ids) - len(keep)
        if not keep:
            emptied.append((key, term, seg))
        else:
            kept.append(([ids[i] for i in keep], [tfs[i] for i in keep], [lens[i] for i in keep], key, term, seg))
    where = f"{key_column} = ? AND term = ? AND seg = ?"
    conn.executemany(f"DELETE FROM {table} WHERE {where}", sorted(emptied))
    conn.executemany(f"UPDATE {table} SET rids = ?, tfs = ?, lens = ? WHERE {where}", sorted(kept, key=lambda k: k[3:]))
    return removed


def score_from(table: str, key_column: str) -> str:
    """`bm25_pg.weighted_query`'s FROM and WHERE over block rows: the postings unnested as `p(rid,
    tf, len)`, joined to the query's `q(term, w)`, so its SUM reads them as one row a posting."""
    return (
        f" FROM {table} b JOIN unnest(?::text[], ?::float8[]) AS q(term, w) ON b.term = q.term"
        f" CROSS JOIN LATERAL unnest(b.rids, b.tfs, b.lens) AS p(rid, tf, len) WHERE b.{key_column} = ?"
    )


__all__ = [
    "BLOCK_BITS",
    "BLOCK_OF_SEG",
    "Block",
    "block_line",
    "blocks_of_counts",
    "copy_blocks",
    "copy_lines",
    "copy_text",
    "remove_from_blocks",
    "score_from",
]
