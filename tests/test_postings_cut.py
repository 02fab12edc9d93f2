"""`fts_terms.cut_blocks` (PostgreSQL's postings cut into block rows ahead of their COPY) gives what the
plain way gives: FTS5's term counts per text (`bm25_pg.count_terms`) grouped by `bm25_blocks.blocks_of_counts`
and printed as COPY lines, for texts FTS5 cuts in every way and row ids in and out of order. No
database is needed."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("numpy")

from knowtree.store.bm25_blocks import blocks_of_counts, copy_text
from knowtree.store.bm25_pg import count_terms
from knowtree.store.fts_terms import cut_blocks
from knowtree.store.migrations_postings import BLOCK_BITS

WORDS = "budget launch review ticket owner deploy cache index invoice region running jumped".split()
ODD = [
    "Café naïve résumé ÆSIR straße",
    "",
    "   \n\t ",
    "tab\there\\back and a\x00null",
    "日本語のテキスト 東京 tokyo",
    "x" * 80 + " running runner runs",
    "ﬁne ﬂow İstanbul ΣΊΣΥΦΟΣ",
    "budget budget budget budget",
]


def _plain(texts: list[str], rids: list[int]) -> tuple[list[tuple[str, str, int]], list[int]]:
    counted = count_terms(texts)
    order = sorted(range(len(rids)), key=rids.__getitem__)  # a block's arrays in row id order
    blocks = blocks_of_counts([rids[i] for i in order], [counted[i] for i in order])
    lines = [
        (
            term,
            f"{copy_text(term)}\t{seg}\t{{{','.join(map(str, ids))}}}\t{{{','.join(map(str, tfs))}}}"
            f"\t{{{','.join(map(str, lens))}}}\n",
            len(ids),
        )
        for term, seg, ids, tfs, lens in blocks
    ]
    return lines, [n for _, n in counted]


@pytest.mark.parametrize("step", [1, 3, 1 << BLOCK_BITS, 5000])
@pytest.mark.parametrize("shuffled", [False, True])
def test_cut_blocks_gives_the_plain_counts_grouped_in_blocks(step: int, shuffled: bool) -> None:
    rng = random.Random(step * 2 + shuffled)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 40))) for _ in range(300)]
    texts[7:7] = ODD
    rids = list(range(9000, 9000 + step * len(texts), step))
    if shuffled:
        rng.shuffle(rids)
    lines, lengths = cut_blocks(texts, rids)
    want_lines, want_lengths = _plain(texts, rids)
    assert lengths == want_lengths
    assert lines == want_lines
    assert sum(n for *_, n in lines) == sum(len(c) for c, _ in count_terms(texts))


def test_cut_blocks_of_nothing_to_cut() -> None:
    assert cut_blocks([], []) == ([], [])
    assert cut_blocks(["", " \n"], [4, 5]) == ([], [0, 0])
