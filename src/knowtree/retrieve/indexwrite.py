"""What a tree index's sync writes besides its entries: each inner entry's number of leaves below it
(the roll-up's N, so a question needs only its candidates' ancestors) and the default embedder's
vectors of the entries written (so no question embeds them). `retrieve.treeindex.sync_entries`
calls both in the save's transaction."""

from __future__ import annotations

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


def write_embedder(embedder: Embedder | str | None) -> Embedder | None:
    if embedder is None or not isinstance(embedder, str):
        return embedder
    from knowtree.retrieve.embed import get_embedder

    try:
        return get_embedder(None if embedder == "default" else embedder)
    except ConfigError:  # no embedding extra: the index is lexical only
        return None


def embed_missing(conn: Any, tree: str, embedder: Embedder | None) -> int:
    """Give every entry of `tree` a vector by `embedder` of its current text (a text embedded before
    is reused, never embedded twice), drop that embedder's vectors of entries gone; returns how
    many entries were embedded."""
    sql = tables(conn)
    if embedder is None:
        return 0
    missing = sql.unembedded(conn, tree, embedder.id)
    if missing:
        have = dict(sql.vectors_by_hash(conn, tree, embedder.id, sorted({m[1] for m in missing})))
        new = [m for m in missing if m[1] not in have]
        fresh = embed_entries(embedder, [m[3] for m in new], [m[2] for m in new])
        for m, v in zip(new, fresh, strict=True):
            have[m[1]] = v.tobytes()
        sql.put_vectors(conn, ((tree, m[0], embedder.id, m[1], have[m[1]]) for m in missing))
    sql.drop_orphan_vectors(conn, tree, embedder.id)
    return len(missing)


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
