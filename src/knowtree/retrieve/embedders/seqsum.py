"""Sums of table rows, one sum per text, added in the texts' token order in float32.

`table[ids].astype(float32).sum(axis=0)` adds the rows one after another (numpy pairs up terms only
along a contiguous axis), so a text's vector depends on that order to the last bit. Here every text
of a batch is summed at once, position by position: the texts sorted longest first, step k adds the
k-th row of each text that has one. The result is bit for bit that of one sum per text, with one
numpy call per position instead of one per text. A text may start from a given row (`start`: the
sum of a context already added up, which the text's rows continue).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: texts summed together: the accumulator and each step's rows (2 x 2 MB at 256 dimensions) stay
#: in the processor's cache (8,192 took 2x the time at 10^5 entries)
BATCH = 2048


def sequential_sums(
    table: np.ndarray,
    ids: np.ndarray,
    offsets: np.ndarray,
    counts: np.ndarray,
    start: np.ndarray | None = None,
    started: np.ndarray | None = None,
) -> np.ndarray:
    """Row sums (float32, len(counts) x dim): text i's rows are
    `table[ids[offsets[i] : offsets[i] + counts[i]]]`, added in order, after `start[i]` where
    `started[i]`. A text with no row and no start sums to zeros."""
    import numpy as np

    n, dim = len(counts), table.shape[1]
    out = np.zeros((n, dim), dtype=np.float32)
    for lo in range(0, n, BATCH):
        part = slice(lo, min(n, lo + BATCH))
        order = np.argsort(-counts[part], kind="stable")
        length = counts[part][order]
        first = offsets[part][order]
        acc = np.zeros((len(order), dim), dtype=np.float32)
        begun = np.zeros(len(order), dtype=bool)
        if start is not None and started is not None:
            begun = started[part][order].copy()
            acc[begun] = start[part][order][begun]
        # how many texts (longest first) have a k-th row, for every k
        active = np.searchsorted(-length, -np.arange(int(length[0]) if len(length) else 0), side="left")
        for k, m in enumerate(active):
            rows = table[ids[first[:m] + k]].astype(np.float32, copy=False)
            if k == 0 and not begun[:m].all():
                fresh = ~begun[:m]
                acc[:m][fresh] = rows[fresh]
                acc[:m][~fresh] += rows[~fresh]
            else:
                acc[:m] += rows
        out[part][order] = acc
    return out
