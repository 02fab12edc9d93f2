"""What a tree index's sync writes besides its entries: each inner entry's number of leaves below it
(the roll-up's N, so a question needs only its candidates' ancestors) and the default embedder's
vectors of the entries written (so no question embeds them). `retrieve.treeindex.sync_entries`
calls both in the save's transaction."""

from __future__ import annotations

import os
from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any, Protocol

from knowtree.errors import ConfigError
from knowtree.retrieve.embedders.base import JoinedEmbedder
from knowtree.store.treeindex_tables import tables

if TYPE_CHECKING:
    import numpy as np

    from knowtree.retrieve.embed import Embedder

EMBED_CHARS = 2000  # an entry's text is embedded up to this many characters
JOINED_BATCH = 16384  # entries per `embed_joined` call (bounds its word lists and id arrays)
WRITE_EMBEDDER = "default"  # the embedder whose vectors are written with the entries (None: none)
#: a tree of at least this many entries takes its dense top-k from the database's approximate index
#: where it has one (PostgreSQL: HNSW, the tree's own, built by the sync: `write_ann_index`); a smaller
#: one is scored exactly, in process. KNOWTREE_ANN_ENTRIES overrides it. Measured (benchmarks/RESULTS.md, E9 continued; PostgreSQL, 115k entries): the first
#: question 3.2 s exact (every vector read) vs 0.2 s, the process 462 vs 97 MB; warm, exact was the
#: faster (retrieve p50 41 vs 54 ms) and agrees with itself, where HNSW's top-256 overlapped it 0.7
ANN_ENTRIES = 50_000


class Embeddable(Protocol):
    context: str
    text: str


def leaf_counts(links: Sequence[tuple[Any, str, str | None, int, int]]) -> dict[str, int]:
    """How many leaf entries lie below each entry (`treescore.rollup`'s N), from (rid, id, parent, leaf, _)."""
    parent = {r[1]: r[2] for r in links}
    count: dict[str, int] = {}
    for r in links:
        if not r[3]:
            continue
        p = parent.get(r[1])
        while p is not None:
            count[p] = count.get(p, 0) + 1
            p = parent.get(p)
    return count


def write_leaf_counts(conn: Any, tree: str) -> None:
    """Store each inner entry's number of leaves below it (only the counts that changed are written)."""
    sql = tables(conn)
    links = sql.links(conn, tree)
    count = leaf_counts(links)
    sql.set_leaf_counts(conn, ((count.get(r[1], 0), r[0]) for r in links if r[4] != count.get(r[1], 0)))


def ann_entries() -> int:
    """The size from which the dense top-k is the database's (`ANN_ENTRIES`, or the environment's)."""
    raw = os.environ.get("KNOWTREE_ANN_ENTRIES", "").strip()
    return int(raw) if raw.isdigit() else ANN_ENTRIES


def write_embedder(embedder: Embedder | str | None) -> Embedder | None:
    if embedder is None or not isinstance(embedder, str):
        return embedder
    from knowtree.retrieve.embed import get_embedder

    try:
        return get_embedder(None if embedder == "default" else embedder)
    except ConfigError:  # no embedding extra: the index is lexical only
        return None


def embed_missing(
    conn: Any, tree: str, embedder: Embedder | None, batch: int = 5000, *, all_written: bool = False
) -> int:
    """Give every entry of `tree` a vector by `embedder` of its current text (a text embedded before
    is reused, never embedded twice), drop that embedder's vectors of entries gone; returns how
    many entries were embedded. Embedded and written `batch` entries at a time, so no more than a
    batch's vectors are held at once. `all_written`: every entry was just written with its vector
    (`write_entries`: a new index), so none is looked for (a join over every entry: 1.9 s at 10^5)."""
    sql = tables(conn)
    if embedder is None:
        return 0
    missing = [] if all_written else sql.unembedded(conn, tree, embedder.id)
    have = dict(sql.vectors_by_hash(conn, tree, embedder.id, sorted({m[1] for m in missing}))) if missing else {}
    for start in range(0, len(missing), batch):
        part = missing[start : start + batch]
        new = list({m[1]: m for m in part if m[1] not in have}.values())  # a text embedded once
        fresh = embed_entries(embedder, [m[3] for m in new], [m[2] for m in new])
        written = {m[1]: v.tobytes() for m, v in zip(new, fresh, strict=True)}
        sql.put_vectors(conn, ((tree, m[0], embedder.id, m[1], have.get(m[1]) or written[m[1]]) for m in part))
    sql.drop_orphan_vectors(conn, tree, embedder.id)
    return len(missing)


def write_entries(conn: Any, tree: str, rows: Sequence[tuple], embedder: Embedder | None, batch: int = 5000) -> int:
    """Insert new entries (`insert_entries`' rows) with their vectors by `embedder`, `batch` rows at a
    time: while one batch's rows and postings are written, a thread prepares the next batch (its
    vectors, and on PostgreSQL its postings cut into blocks: `EntryWriter.prepare`), so the client's
    work and the database's overlap; at most two batches are held. A text with a stored vector
    (another entry's, of the same text) is not embedded again. Returns how many entries got a vector."""
    sql = tables(conn)
    if not rows:
        return 0
    from concurrent.futures import Future, ThreadPoolExecutor

    have = dict(sql.vectors_by_hash(conn, tree, embedder.id, sorted({r[7] for r in rows}))) if embedder else {}
    parts = [rows[i : i + batch] for i in range(0, len(rows), batch)]
    writer = sql.EntryWriter(conn)
    writer.reserve(len(rows))  # PostgreSQL: every row's id now, so a batch is cut into its blocks ahead

    def ahead(i: int) -> tuple[dict[str, bytes], Any]:
        part = parts[i]
        got: dict[str, bytes] = {}
        if embedder is not None:
            new = list({r[7]: r for r in part if r[7] not in have}.values())
            fresh = embed_entries(embedder, [r[9] for r in new], [r[8] for r in new])
            got = {r[7]: v.tobytes() for r, v in zip(new, fresh, strict=True)}
        return got, writer.prepare(part, i * batch)

    with ThreadPoolExecutor(1, thread_name_prefix="knowtree-embed") as pool:
        pending: list[Future[tuple[dict[str, bytes], Any]]] = [pool.submit(ahead, 0)]
        for i, part in enumerate(parts):
            if i + 1 < len(parts):
                pending.append(pool.submit(ahead, i + 1))
            got, prepared = pending.pop(0).result()
            writer.write(part, prepared)
            if embedder is not None:
                sql.put_vectors(
                    conn,
                    ((tree, r[1], embedder.id, r[7], have[r[7]] if r[7] in have else got[r[7]]) for r in part),
                )
    writer.close()
    return len(rows) if embedder is not None else 0


def prepare_ann_index(conn: Any, tree: str, embedder: Embedder | None, entries: int) -> None:
    """Before a sync writes vectors of a tree that `write_ann_index` will give its index: the store
    holds off other index builds until this transaction ends (PostgreSQL: two saves that each wrote
    vectors and then each built an index would deadlock)."""
    if embedder is not None and entries >= ann_entries():
        tables(conn).will_build_ann_index(conn, tree, embedder.id, embedder.dim)


def write_ann_index(conn: Any, tree: str, embedder: Embedder | str | None, entries: int) -> bool:
    """Give a tree of `ann_entries()` entries or more its approximate index over `embedder`'s vectors
    (`write_embedder`'s) where the store has one (PostgreSQL: the tree's own HNSW, built once over the
    written vectors); True when built now."""
    if entries < ann_entries() or (found := write_embedder(embedder)) is None:
        return False
    return bool(tables(conn).ensure_ann_index(conn, tree, found.id, found.dim))


def write_ann_indexes(store: Any) -> list[str]:
    """Give every tree of `ann_entries()` entries or more that lacks one its approximate index where
    the store has them (PostgreSQL's HNSW), one transaction per tree; returns the trees given one
    now. For trees whose rows were written without a sync: `db copy` copies rows, not indexes, and a
    copied tree's index state is the source's, so no sync would build it (the tree would be scored
    exactly, every vector read by each process that asks it)."""
    built = []
    for tree, entries in store.read(lambda c: tables(c).index_sizes(c)):
        if entries >= ann_entries() and store.write(
            lambda c, t=tree, n=entries: write_ann_index(c, t, WRITE_EMBEDDER, n)
        ):
            built.append(tree)
    return built


def embed_text(context: str, text: str) -> str:
    """What an entry's vector is of: its context and text, cut to `EMBED_CHARS`."""
    return (f"{context}\n{text}" if context else text)[:EMBED_CHARS]


def embed_texts(embedder: Embedder, texts: Sequence[str], batch: int = 256) -> np.ndarray:
    """Vectors of texts, in batches."""
    import numpy as np

    parts = [embedder.embed(texts[i : i + batch]) for i in range(0, len(texts), batch)]
    return np.concatenate(parts) if parts else np.zeros((0, embedder.dim), dtype=np.float32)


def embed_entries(
    embedder: Embedder, contexts: Sequence[str], texts: Sequence[str], batch: int = JOINED_BATCH
) -> np.ndarray:
    """The vectors of `embed_text(context, text)` of entries: by the embedder's `embed_joined` where
    it has one (each distinct context of a batch tokenized and added up once: the same vectors),
    else by `embed_texts`."""
    import numpy as np

    if not isinstance(embedder, JoinedEmbedder):
        return embed_texts(embedder, [embed_text(c, t) for c, t in zip(contexts, texts, strict=True)])
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    # entries of one context side by side, so that a context falls in one batch (or two)
    groups: dict[str, list[int]] = {}
    for i, context in enumerate(contexts):
        groups.setdefault(context, []).append(i)
    order = list(chain.from_iterable(groups.values()))
    out = np.empty((len(texts), embedder.dim), dtype=np.float32)
    for i in range(0, len(order), batch):
        part = order[i : i + batch]
        out[part] = embedder.embed_joined([contexts[j] for j in part], [texts[j] for j in part], EMBED_CHARS)
    return out


def embed_rows(embedder: Embedder, rows: Sequence[Embeddable], batch: int = JOINED_BATCH) -> np.ndarray:
    """Vectors of entries (context and text, cut to `EMBED_CHARS`)."""
    return embed_entries(embedder, [r.context for r in rows], [r.text for r in rows], batch)
