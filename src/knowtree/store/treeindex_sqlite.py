"""The tree index's tables on SQLite (`tree_index`, its FTS5 rows `tree_index_fts`, `tree_index_vec`,
`tree_index_state`): every statement `retrieve.treeindex` runs, as functions of a connection, so
`retrieve/` keeps the derivation and the scoring and no SQL of its own.

Each function runs on the connection a store hands to `store.read(fn)` / `store.write(fn)` (the
caller's transaction). Rows come back as tuples in the order each docstring names.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence

from knowtree.errors import StoreError
from knowtree.store.fts_terms import create_term_lookup
from knowtree.store.rows import NODE_COLUMNS, in_batches

#: what `entry_rows` and `rows_by_id` return per entry, in this order
ENTRY_COLUMNS = "id, node, parent, leaf, ord, text, context, body_hash, cite_json, leaves"

#: vector dimensions with an approximate index in the database: none here (SQLite's vectors are
#: scored exactly, memory-mapped; `treeindex_pg.ANN_DIMS` has HNSW)
ANN_DIMS: tuple[int, ...] = ()


# -- what the entries are derived from ------------------------------------------------------------
def doc_lines(conn: sqlite3.Connection, tree: str) -> list[tuple[str, str, str, str]]:
    """(path, node_id, description, meta_json) of every document of a collection; [] on a
    database before the collections migration."""
    try:
        return conn.execute(
            "SELECT path, node_id, description, meta_json FROM doc_info WHERE tree = ?", (tree,)
        ).fetchall()
    except sqlite3.OperationalError:
        return []


def tree_head(conn: sqlite3.Connection, tree: str) -> tuple[str | None, str] | None:
    """(root_id, updated) of a tree, None when there is none."""
    return conn.execute("SELECT root_id, updated FROM trees WHERE name = ?", (tree,)).fetchone()


def node_rows(conn: sqlite3.Connection, tree: str) -> list[tuple]:
    """Every node row of a tree (`store.rows.NODE_COLUMNS`)."""
    return conn.execute(f"SELECT {NODE_COLUMNS} FROM nodes WHERE tree = ?", (tree,)).fetchall()


def iter_node_rows(conn: sqlite3.Connection, tree: str) -> Iterator[tuple]:
    """`node_rows`, one at a time (the cursor streams them)."""
    yield from conn.execute(f"SELECT {NODE_COLUMNS} FROM nodes WHERE tree = ?", (tree,))


# -- the index's state ------------------------------------------------------------------------------
def read_state(conn: sqlite3.Connection, tree: str) -> tuple[str, int, str] | None:
    """(signature, entries, content fingerprint) of a tree's index, None when never indexed."""
    return conn.execute(
        "SELECT signature, entries, content FROM tree_index_state WHERE tree = ?", (tree,)
    ).fetchone()


def index_sizes(conn: sqlite3.Connection) -> list[tuple[str, int]]:
    """(tree, entries) of every tree with an index, by name."""
    return [(str(t), int(n)) for t, n in conn.execute("SELECT tree, entries FROM tree_index_state ORDER BY tree")]


def set_signature(conn: sqlite3.Connection, tree: str, sig: str) -> None:
    conn.execute("UPDATE tree_index_state SET signature = ? WHERE tree = ?", (sig, tree))


def write_state(
    conn: sqlite3.Connection, tree: str, sig: str | None, entries: int, updated: str, content: str
) -> None:
    """Record what the index was built from (`sig` None: the tree is gone, the state too)."""
    if sig is None:
        conn.execute("DELETE FROM tree_index_state WHERE tree = ?", (tree,))
        return
    conn.execute(
        "INSERT INTO tree_index_state(tree, signature, entries, updated, content) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (tree) DO UPDATE SET signature = excluded.signature, entries = excluded.entries,"
        " updated = excluded.updated, content = excluded.content",
        (tree, sig, entries, updated, content),
    )


# -- writing entries --------------------------------------------------------------------------------
def indexed(conn: sqlite3.Connection, tree: str) -> list[tuple]:
    """(id, hash, rid, body_hash, node, src, leaf, parent, ord) of every entry of a tree."""
    return conn.execute(
        "SELECT id, hash, rid, body_hash, node, src, leaf, parent, ord FROM tree_index WHERE tree = ?",
        (tree,),
    ).fetchall()


def delete_entries(conn: sqlite3.Connection, rids: Sequence[int], chunk: int = 500) -> None:
    """Delete entries and their FTS rows (an external-content FTS row is deleted with the text it indexed)."""
    for part, marks in in_batches(rids, chunk):
        conn.execute(
            "INSERT INTO tree_index_fts(tree_index_fts, rowid, tree, id, body)"
            f" SELECT 'delete', rid, tree, id, body FROM tree_index WHERE rid IN ({marks})",
            part,
        )
        conn.execute(f"DELETE FROM tree_index WHERE rid IN ({marks})", part)


def repoint(conn: sqlite3.Connection, rows: Iterable[tuple[str | None, str, int]]) -> None:
    """(parent, hash, rid): entries kept under a new parent id."""
    conn.executemany("UPDATE tree_index SET parent = ?, hash = ? WHERE rid = ?", list(rows))


def move(conn: sqlite3.Connection, rows: Iterable[tuple]) -> None:
    """(node, parent, leaf, ord, hash, cite_json, src, rid): entries whose text stays, in a new place."""
    conn.executemany(
        "UPDATE tree_index SET node = ?, parent = ?, leaf = ?, ord = ?, hash = ?, cite_json = ?, src = ?"
        " WHERE rid = ?",
        list(rows),
    )


def insert_entries(conn: sqlite3.Connection, rows: Sequence[tuple]) -> None:
    """(tree, id, node, parent, leaf, ord, hash, body_hash, text, context, cite_json, src) as new
    entries, with their FTS rows (sharing the entry's rowid, reading its text from the entry)."""
    if not rows:
        return
    last = conn.execute("SELECT COALESCE(MAX(rid), 0) FROM tree_index").fetchone()[0]  # new rows come after
    conn.executemany(
        "INSERT INTO tree_index(tree, id, node, parent, leaf, ord, hash, body_hash, text, context, cite_json, src)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.execute(
        "INSERT INTO tree_index_fts(rowid, tree, id, body) SELECT rid, tree, id, body FROM tree_index WHERE rid > ?",
        (last,),
    )


class EntryWriter:
    """`treeindex_pg.EntryWriter`'s interface: FTS5 cuts and counts inside SQLite, so nothing is
    prepared ahead and there are no statistics to add up."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def reserve(self, n: int) -> None:
        return None

    def prepare(self, part: Sequence[tuple], start: int) -> None:
        return None

    def write(self, part: Sequence[tuple], prepared: None = None) -> None:
        insert_entries(self.conn, part)

    def close(self) -> None:
        return None


def links(conn: sqlite3.Connection, tree: str) -> list[tuple[int, str, str | None, int, int]]:
    """(rid, id, parent, leaf, leaves) of every entry: the tree's shape, for the leaf counts."""
    return conn.execute(
        "SELECT rid, id, parent, leaf, leaves FROM tree_index WHERE tree = ?", (tree,)
    ).fetchall()


def set_leaf_counts(conn: sqlite3.Connection, rows: Iterable[tuple[int, int]]) -> None:
    """(leaves, rid): how many leaf entries lie below each inner entry."""
    conn.executemany("UPDATE tree_index SET leaves = ? WHERE rid = ?", list(rows))


def drop_tree(conn: sqlite3.Connection, tree: str) -> None:
    """Forget a tree's index (its tree is gone)."""
    conn.execute(
        "INSERT INTO tree_index_fts(tree_index_fts, rowid, tree, id, body)"
        " SELECT 'delete', rid, tree, id, body FROM tree_index WHERE tree = ?",
        (tree,),
    )
    for table in ("tree_index", "tree_index_vec", "tree_index_state"):
        conn.execute(f"DELETE FROM {table} WHERE tree = ?", (tree,))


# -- reading entries --------------------------------------------------------------------------------
def entry_rows(conn: sqlite3.Connection, tree: str) -> list[tuple]:
    """Every entry (`ENTRY_COLUMNS`): leaves first in document order, then the inner entries."""
    return conn.execute(
        f"SELECT {ENTRY_COLUMNS} FROM tree_index WHERE tree = ? ORDER BY leaf DESC, ord, rid", (tree,)
    ).fetchall()


def rows_by_id(conn: sqlite3.Connection, tree: str, ids: Sequence[str]) -> list[tuple]:
    """The entries named (`ENTRY_COLUMNS`), in no particular order."""
    out: list[tuple] = []
    for part, marks in in_batches(list(ids), 500):
        out += conn.execute(
            f"SELECT {ENTRY_COLUMNS} FROM tree_index WHERE tree = ? AND id IN ({marks})", (tree, *part)
        ).fetchall()
    return out


def _match(terms: Sequence[str]) -> str:
    """An FTS5 query that ORs the terms, each quoted so no FTS5 syntax can leak in."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def lexical(conn: sqlite3.Connection, tree: str, terms: Sequence[str], limit: int) -> list[tuple[str, float]]:
    """(id, BM25) of the `limit` best entries holding any of the query words `terms`, best first
    (FTS5's bm25: lower is better)."""
    match = _match(terms)
    try:
        return conn.execute(
            "SELECT id, bm25(tree_index_fts) FROM tree_index_fts WHERE tree_index_fts MATCH ? AND tree = ?"
            " ORDER BY bm25(tree_index_fts) LIMIT ?",
            (match, tree, limit),
        ).fetchall()
    except sqlite3.OperationalError as exc:  # every term is quoted: should not happen
        raise StoreError(f"index search failed for {match[:80]!r} ({exc})") from exc


def lexical_top(
    conn: sqlite3.Connection, tree: str, terms: Sequence[str], limit: int
) -> list[tuple[str, float]]:
    """`lexical`, faster on a large index: FTS5 ranks every entry matching the query without its
    `tree` filter (an UNINDEXED column of an external-content table is read from `tree_index` row by
    row: 3x the time), then the rows of other trees are dropped; when that leaves fewer than `limit`
    while more rows matched, the filtered query runs (the same BM25: the filter changes no statistic)."""
    wide = limit * 4
    match = _match(terms)
    try:
        got = conn.execute(
            "SELECT rowid, bm25(tree_index_fts) FROM tree_index_fts WHERE tree_index_fts MATCH ?"
            " ORDER BY bm25(tree_index_fts) LIMIT ?",
            (match, wide),
        ).fetchall()
    except sqlite3.OperationalError as exc:  # every term is quoted: should not happen
        raise StoreError(f"index search failed for {match[:80]!r} ({exc})") from exc
    ids: dict[int, str] = {}
    for part, marks in in_batches([r[0] for r in got], 500):  # by rowid: `tree = ?` here made SQLite
        # walk the tree's (tree, id) index instead
        for rid, entry, owner in conn.execute(
            f"SELECT rid, id, tree FROM tree_index WHERE rid IN ({marks})", part
        ):
            if owner == tree:
                ids[rid] = entry
    if len(ids) < limit and len(got) == wide:
        return lexical(conn, tree, terms, limit)
    return [(ids[r], b) for r, b in got if r in ids][:limit]


def term_docs_key(conn: sqlite3.Connection, tree: str) -> tuple[object, int]:
    """(what `term_docs`'s counts depend on, the entries of every tree), in one cheap read: equal keys
    mean equal counts, so a process keeps the counts of the words it looked up (counting a word's
    entries reads its whole posting list: ~5 ms a question at 10^5 entries). The key is FTS5's
    structure record (`tree_index_fts_data` row 10, rewritten by every write to the full-text
    index: each commit adds a segment and moves its write counter on) with the index states' count
    and entries (`tree` names the tree searched: the counts are the whole table's)."""
    row = conn.execute(
        "SELECT (SELECT block FROM tree_index_fts_data WHERE id = 10), COUNT(*), COALESCE(SUM(entries), 0)"
        " FROM tree_index_state"
    ).fetchone()
    return (row[0], row[1], row[2]), int(row[2])


def term_docs(conn: sqlite3.Connection, tree: str, terms: Sequence[str]) -> tuple[dict[str, int], int]:
    """({query term: how many entries of every tree hold it, as FTS5 tokenizes it}, entries): the
    statistics FTS5's BM25 computes its idf from (the whole table's: `tree` names the tree searched).
    A term FTS5 splits or drops is absent."""
    create_term_lookup(conn)
    conn.executemany("INSERT INTO temp.kt_query_terms(rowid, term) VALUES (?, ?)", list(enumerate(terms)))
    try:
        tokens = conn.execute("SELECT doc, term FROM temp.kt_query_vocab").fetchall()
    finally:
        conn.execute("DELETE FROM temp.kt_query_terms")
    one: dict[int, list[str]] = {}
    for doc, token in tokens:
        one.setdefault(doc, []).append(token)
    stemmed = {terms[d]: t[0] for d, t in one.items() if len(t) == 1}
    found: dict[str, int] = {}
    for part, marks in in_batches(sorted(set(stemmed.values())), 500):
        found.update(conn.execute(f"SELECT term, doc FROM temp.kt_index_vocab WHERE term IN ({marks})", part))
    total = conn.execute("SELECT COALESCE(SUM(entries), 0) FROM tree_index_state").fetchone()[0]
    return {q: found.get(t, 0) for q, t in stemmed.items()}, int(total)


# -- vectors ----------------------------------------------------------------------------------------
def vectors(conn: sqlite3.Connection, tree: str, embedder: str) -> list[tuple[str, str, bytes]]:
    """(id, hash of the text embedded, float32 bytes) of every vector of a tree by `embedder`."""
    return conn.execute(
        "SELECT id, hash, vec FROM tree_index_vec WHERE tree = ? AND embedder = ?", (tree, embedder)
    ).fetchall()


def current_vectors(conn: sqlite3.Connection, tree: str, embedder: str) -> list[tuple[str, bytes]]:
    """(id, vector) of the entries whose vector by `embedder` is of their current text."""
    return conn.execute(
        "SELECT v.id, v.vec FROM tree_index_vec v JOIN tree_index t ON t.tree = v.tree AND t.id = v.id"
        " AND t.body_hash = v.hash WHERE v.tree = ? AND v.embedder = ?",
        (tree, embedder),
    ).fetchall()


def unembedded(conn: sqlite3.Connection, tree: str, embedder: str) -> list[tuple[str, str, str, str]]:
    """(id, body_hash, text, context) of the entries with no vector by `embedder` of their current text."""
    return conn.execute(
        "SELECT t.id, t.body_hash, t.text, t.context FROM tree_index t LEFT JOIN tree_index_vec v"
        " ON v.tree = t.tree AND v.embedder = ? AND v.id = t.id AND v.hash = t.body_hash"
        " WHERE t.tree = ? AND v.id IS NULL",
        (embedder, tree),
    ).fetchall()


def put_vectors(conn: sqlite3.Connection, rows: Iterable[tuple[str, str, str, str, bytes]]) -> None:
    """(tree, id, embedder, hash, vec): stored, replacing an entry's older vector."""
    conn.executemany(
        "INSERT INTO tree_index_vec(tree, id, embedder, hash, vec) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (tree, embedder, id) DO UPDATE SET hash = excluded.hash, vec = excluded.vec",
        list(rows),
    )


def will_build_ann_index(conn: sqlite3.Connection, tree: str, embedder: str, dim: int) -> None:
    """Nothing: SQLite builds no approximate index (and has one writer at a time)."""


def ensure_ann_index(conn: sqlite3.Connection, tree: str, embedder: str, dim: int) -> bool:
    """Nothing: SQLite's vectors are scored exactly (`ANN_DIMS` is empty); PostgreSQL builds a tree's HNSW."""
    return False


def drop_vectors(conn: sqlite3.Connection, tree: str, ids: Iterable[str]) -> None:
    conn.executemany("DELETE FROM tree_index_vec WHERE tree = ? AND id = ?", [(tree, i) for i in ids])


def drop_orphan_vectors(conn: sqlite3.Connection, tree: str, embedder: str | None = None) -> None:
    """Vectors whose entries are gone (kept only for reuse by text), of one embedder or of all."""
    which = "" if embedder is None else " AND embedder = ?"
    conn.execute(
        f"DELETE FROM tree_index_vec WHERE tree = ?{which} AND id NOT IN (SELECT id FROM tree_index WHERE tree = ?)",
        (tree, *(() if embedder is None else (embedder,)), tree),
    )


def vectors_by_hash(
    conn: sqlite3.Connection, tree: str, embedder: str, hashes: Sequence[str]
) -> list[tuple[str, bytes]]:
    """(hash, vec) of stored vectors by `embedder` of these texts (a text is never embedded twice)."""
    out: list[tuple[str, bytes]] = []
    for part, marks in in_batches(list(hashes), 500):
        out += conn.execute(
            f"SELECT hash, vec FROM tree_index_vec WHERE tree = ? AND embedder = ? AND hash IN ({marks})",
            (tree, embedder, *part),
        ).fetchall()
    return out
