"""Bulk writes on PostgreSQL for a tree's save (branch pgbuild): rows streamed with COPY in batches,
vectors sent in COPY's binary format (pgvector's own: no float printed as text and parsed again),
upserts through a temporary staging table (COPY, then one `INSERT … SELECT … ON CONFLICT`), and a
tree's own HNSW index built once over its loaded vectors (`ensure_ann_index`) instead of every
vector inserted one by one into a graph shared by every tree.

Table and column names here are the callers' own, never user input; values travel as COPY data or
bound parameters, except the tree and embedder names that an index predicate must hold as literals
(quoted by psycopg's `sql.Literal`).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, TypeVar

T = TypeVar("T")

BATCH = 5000  # rows per COPY batch and per staging round: what the save holds at once
SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)  # COPY binary header: flags 0, no extension
TRAILER = struct.pack("!h", -1)


def batches(rows: Iterable[T], size: int = BATCH) -> Iterator[list[T]]:
    """`rows` in lists of at most `size`, consumed lazily (a generator is never materialized whole)."""
    it = iter(rows)
    while part := list(islice(it, size)):
        yield part


def _field(value: bytes) -> bytes:
    return struct.pack("!i", len(value)) + value


def vector_binary(vec: bytes) -> bytes:
    """A float32 vector's bytes (native order, as `tree_index_vec.vec` holds them) in pgvector's binary
    format: int16 dimensions, int16 0, then big-endian float32s."""
    import numpy as np

    arr = np.frombuffer(vec, dtype=np.float32)
    return struct.pack("!hh", len(arr), 0) + arr.astype(">f4").tobytes()


def vector_tuples(rows: Iterable[tuple[str, str, str, str, bytes]]) -> Iterator[bytes]:
    """(tree, id, embedder, hash, vec) rows as COPY binary tuples of (tree, id, embedder, hash, vec, emb)."""
    count = struct.pack("!h", 6)
    for tree, entry, embedder, digest, vec in rows:
        yield b"".join(
            (
                count,
                _field(tree.encode()),
                _field(entry.encode()),
                _field(embedder.encode()),
                _field(digest.encode()),
                _field(bytes(vec)),
                _field(vector_binary(vec)),
            )
        )


def copy_binary(raw: Any, table: str, columns: Sequence[str], tuples: Iterable[bytes]) -> None:
    """COPY ready-made binary tuples into `table` (the header and trailer are added here)."""
    sql = f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)"
    with raw.cursor() as cur, cur.copy(sql) as copy:
        copy.write(SIGNATURE)
        for part in batches(tuples, 1000):
            copy.write(b"".join(part))
        copy.write(TRAILER)


def staged_upsert(
    conn: Any, table: str, columns: Sequence[str], rows: Iterable[Sequence[object]], conflict: str, *, order: str = ""
) -> None:
    """Insert `rows` into `table`, each batch COPYed into a temporary table of the same columns
    and moved over in one statement ending `conflict` (`ON CONFLICT …`); `order` sorts the rows
    inserted (a fixed order of upserts: writers of shared keys cannot deadlock)."""
    cols = ", ".join(columns)
    stage = f"kt_stage_{table}"
    conn.raw.execute(f"CREATE TEMP TABLE IF NOT EXISTS {stage} ON COMMIT DROP AS SELECT {cols} FROM {table} WITH NO DATA")
    sort = f" ORDER BY {order}" if order else ""
    for part in batches(rows):
        conn.copy_rows(stage, columns, part)
        conn.raw.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {stage}{sort} {conflict}")
        conn.raw.execute(f"TRUNCATE {stage}")


def staged_upsert_binary(
    conn: Any, table: str, columns: Sequence[str], tuples: Iterable[bytes], conflict: str
) -> None:
    """`staged_upsert` of ready-made COPY binary tuples."""
    cols = ", ".join(columns)
    stage = f"kt_stage_{table}"
    conn.raw.execute(f"CREATE TEMP TABLE IF NOT EXISTS {stage} ON COMMIT DROP AS SELECT {cols} FROM {table} WITH NO DATA")
    for part in batches(tuples):
        copy_binary(conn.raw, stage, columns, part)
        conn.raw.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {stage} {conflict}")
        conn.raw.execute(f"TRUNCATE {stage}")


# -- a tree's own HNSW index -------------------------------------------------------------------------
def ann_index_name(tree: str, embedder: str, dim: int) -> str:
    """The name of the HNSW index over `tree`'s vectors by `embedder` of `dim` dimensions (under
    PostgreSQL's 63 characters whatever the names; `kt_ann_<tree>_` is the tree's prefix)."""
    return f"{ann_prefix(tree)}{hashlib.sha256(embedder.encode()).hexdigest()[:8]}_{int(dim)}"


def ann_prefix(tree: str) -> str:
    return f"kt_ann_{hashlib.sha256(tree.encode()).hexdigest()[:24]}_"


def literal(conn: Any, value: str) -> str:
    """`value` as an SQL string literal (for an index predicate, which a bound parameter cannot match)."""
    from psycopg import sql

    return sql.Literal(value).as_string(conn.raw)


def ann_predicate(conn: Any, tree: str, embedder: str, dim: int, alias: str = "") -> str:
    """The predicate of `ann_index_name(tree, embedder, dim)`; a query filtered by exactly it can use the index."""
    a = f"{alias}." if alias else ""
    return (
        f"{a}tree = {literal(conn, tree)} AND {a}embedder = {literal(conn, embedder)}"
        f" AND vector_dims({a}emb) = {int(dim)}"
    )


def has_ann_index(conn: Any, tree: str, embedder: str, dim: int) -> bool:
    """Whether the tree's HNSW index exists (and is valid)."""
    row = conn.raw.execute(
        "SELECT indisvalid FROM pg_index WHERE indrelid = 'tree_index_vec'::regclass"
        " AND indexrelid = to_regclass(%s)",
        (ann_index_name(tree, embedder, dim),),
    ).fetchone()
    return bool(row and row[0])


def hold_ann_builds(conn: Any) -> None:
    """Until this transaction ends, no other transaction builds a tree's HNSW index. Taken before the
    transaction writes any vector, by a save that will build one: `CREATE INDEX` waits for every
    transaction that wrote `tree_index_vec` to end, so two saves that had both written vectors and
    then both built an index would wait for each other (a deadlock: PostgreSQL aborts one)."""
    conn.raw.execute("SELECT pg_advisory_xact_lock(hashtext('knowtree ann index build'))")


def ensure_ann_index(conn: Any, tree: str, embedder: str, dim: int, vectors: int) -> bool:
    """Build `tree`'s HNSW index over its `dim`-dimensional vectors by `embedder` when it has none
    (True: built now), inside the caller's transaction: built once over the loaded vectors, which is
    several times faster than inserting each vector into a graph. `vectors` (how many there are)
    sizes the build's memory (`maintenance_work_mem`, the server's, for this transaction only);
    later writes of the tree go into it one by one, as any index's."""
    if has_ann_index(conn, tree, embedder, dim):
        return False
    name = ann_index_name(tree, embedder, dim)
    conn.raw.execute(f"DROP INDEX IF EXISTS {name}")  # an invalid leftover
    memory_mb = max(64, min(4096, int(vectors * (dim * 4 + 400) * 1.3 / 2**20) + 32))
    conn.raw.execute(f"SET LOCAL maintenance_work_mem = '{memory_mb}MB'")
    conn.raw.execute(
        f"CREATE INDEX {name} ON tree_index_vec USING hnsw ((emb::vector({int(dim)})) vector_ip_ops)"
        f" WHERE {ann_predicate(conn, tree, embedder, dim)}"
    )
    return True


def drop_ann_indexes(conn: Any, tree: str) -> None:
    """Drop every HNSW index of `tree` (the tree is gone)."""
    prefix = ann_prefix(tree)
    names = conn.raw.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = 'tree_index_vec'::regclass AND left(c.relname, %s) = %s",
        (len(prefix), prefix),
    ).fetchall()
    for (name,) in names:
        conn.raw.execute(f"DROP INDEX IF EXISTS {name}")
