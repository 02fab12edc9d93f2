"""`knowtree db copy` speed: a synthetic tree of N nodes (leaves of ~300 characters under branches of
10, its documents, its tree index with hash-embedder vectors) copied SQLite -> SQLite, SQLite ->
PostgreSQL and PostgreSQL -> SQLite; rows/s over every row copied (all tables), verification included.

    python benchmarks/bench_db_copy.py --nodes 10000 --pg-dir /tmp/pg-bench

Needs the postgres extra for the PostgreSQL legs (`--pg-dir` omitted: SQLite only).
"""

from __future__ import annotations

import argparse
import hashlib
import random
import tempfile
import time
from pathlib import Path

from knowtree.core import KnowTree
from knowtree.store import open_store
from knowtree.store.copy import copy_store
from knowtree.testing.models import KeywordModel
from knowtree.types import Document, Node, NodeKind, NodeMeta, Span

WORDS = "harbor lantern ledger invoice router kernel orchard meadow falcon quartz cobalt amber velvet".split()


def synthetic_tree(nodes: int, fanout: int = 10) -> tuple[str, list[Node], list[Document]]:
    """About `nodes` nodes: leaves of ~300 characters, one document per 50 leaves, branches of `fanout`."""
    rng = random.Random(7)
    leaves = max(1, round(nodes * (fanout - 1) / fanout))
    out: list[Node] = []
    docs: list[Document] = []
    level: list[Node] = []
    for d in range(0, leaves, 50):
        texts = [
            f"Report {i}: " + " ".join(rng.choice(WORDS) for _ in range(40))
            for i in range(d, min(d + 50, leaves))
        ]
        body = "\n\n".join(texts)
        path = f"reports/r{d // 50:05d}.md"
        docs.append(Document(path=path, text=body, sha256=hashlib.sha256(body.encode()).hexdigest()))
        pos = 0
        for i, t in enumerate(texts):
            span = Span(file=path, start=pos, end=pos + len(t), line_start=2 * i + 1, line_end=2 * i + 1)
            pos += len(t) + 2
            level.append(
                Node(id=f"l{d + i:07d}", kind=NodeKind.LEAF, level=0, meta=NodeMeta(), text=t, spans=[span])
            )
    out.extend(level)
    depth = 0
    while len(level) > 1:
        depth += 1
        up = []
        for j in range(0, len(level), fanout):
            group = level[j : j + fanout]
            kind = NodeKind.BRANCH
            up.append(
                Node(id=f"b{depth}_{j // fanout:07d}", kind=kind, level=depth, meta=NodeMeta(summary=group[0].text[:80]),
                     children=[n.id for n in group])
            )  # fmt: skip
        out.extend(up)
        level = up
    root = level[0].model_copy(update={"kind": NodeKind.ROOT})
    out[-1] = root
    return root.id, out, docs


def timed_copy(src: str, dst: str) -> tuple[float, int, bool]:
    s, d = open_store(src), open_store(dst)
    start = time.perf_counter()
    report = copy_store(s, d)
    seconds = time.perf_counter() - start
    s.close()
    d.close()
    return seconds, report.rows, report.ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--pg-dir", default=None, help="a directory for a local PostgreSQL (knowtree db start)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ktcopy"))
    src = str(work / "src.db")
    root, nodes, docs = synthetic_tree(args.nodes)
    with KnowTree(src, model=KeywordModel()) as kt:
        kt.store.save_tree("big", root_id=root, nodes=nodes, documents=docs, model="keyword", settings={})
        t0 = time.perf_counter()
        kt.tree("big").retrieve(
            "harbor lantern", budget_tokens=400, embedder="hash"
        )  # the index and its vectors
        print(
            f"source: {len(nodes)} nodes, {len(docs)} documents; tree index built in {time.perf_counter() - t0:.1f} s"
        )
    legs = [(src, str(work / "copy.db"))]
    if args.pg_dir:
        from knowtree.store import pgserver

        url = pgserver.start(args.pg_dir)
        legs += [(src, url), (url, str(work / "back.db"))]
    for a, b in legs:
        seconds, rows, ok = timed_copy(a, b)
        name = lambda t: "PostgreSQL" if "://" in t else "SQLite"  # noqa: E731
        print(
            f"{name(a)} -> {name(b)}: {rows} rows in {seconds:.1f} s = {rows / seconds:,.0f} rows/s, verified {ok}"
        )
    if args.pg_dir:
        pgserver.stop(args.pg_dir)


if __name__ == "__main__":
    main()
