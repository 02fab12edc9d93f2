"""`save_tree` of a large tree on both stores (issue 36): the store alone (no tree-index hook), a
synthetic tree of N leaves (~300 characters each) under branches of 10 and one root, saved twice
(a first save, then a replace of the same tree). Prints a JSON line per backend.

    PYTHONPATH=src python benchmarks/bench_pg_save.py --nodes 10000 --dir /tmp/pg-bench

`--dir`: where a local PostgreSQL is started (or reused); a database `bench_save` is made afresh in it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from knowtree.store import open_store
from knowtree.types import Document, Node, NodeKind, NodeMeta, Span


def synthetic_tree(leaves: int) -> tuple[str, list[Node]]:
    nodes: list[Node] = []
    leaf_ids = []
    for i in range(leaves):
        text = f"Leaf {i}: the keeper of lighthouse {i % 97} logged {i * 7} ships passing the northern rocks. " * 3
        node = Node(
            id=f"leaf-{i}", kind=NodeKind.LEAF, level=0, meta=NodeMeta(summary=f"Ships logged at {i % 97}."),
            text=text[:300], spans=[Span(file=f"d{i // 100}.txt", start=0, end=300, line_start=1, line_end=3)],
        )  # fmt: skip
        nodes.append(node)
        leaf_ids.append(node.id)
    level, current = 1, leaf_ids
    while len(current) > 1:
        parents = []
        for j in range(0, len(current), 10):
            kind = NodeKind.ROOT if len(current) <= 10 else NodeKind.BRANCH
            node = Node(
                id=f"n{level}-{j}", kind=kind, level=level, children=current[j : j + 10],
                meta=NodeMeta(summary=f"Group {j} of level {level}."),
            )  # fmt: skip
            nodes.append(node)
            parents.append(node.id)
        level, current = level + 1, parents
    return current[0], nodes


def measure(target: str, leaves: int) -> dict[str, object]:
    root, nodes = synthetic_tree(leaves)
    docs = [Document(path=f"d{i}.txt", text="x" * 100, sha256=str(i)) for i in range(leaves // 100)]
    store = open_store(target)
    out: dict[str, object] = {"backend": store.dialect, "leaves": leaves, "nodes": len(nodes)}
    for label in ("first_save_s", "replace_s"):
        started = time.perf_counter()
        store.save_tree("big", root_id=root, nodes=nodes, documents=docs, model="m", settings={})
        out[label] = round(time.perf_counter() - started, 3)
    started = time.perf_counter()
    loaded = store.load_nodes("big")
    out["load_all_s"] = round(time.perf_counter() - started, 3)
    assert len(loaded) == len(nodes)
    started = time.perf_counter()
    hits = store.search_nodes("big", "lighthouse 42 ships")
    out["search_s"] = round(time.perf_counter() - started, 4)
    assert hits
    store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000, help="leaves")
    parser.add_argument("--dir", required=True, help="local PostgreSQL data directory (started or reused)")
    args = parser.parse_args(argv)
    import psycopg

    from knowtree.store import pgserver

    url = pgserver.start(args.dir)
    admin = url.replace("/knowtree?", "/postgres?")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS bench_save WITH (FORCE)")
        conn.execute("CREATE DATABASE bench_save")
    with tempfile.TemporaryDirectory() as tmp:
        for target in (str(Path(tmp) / "kb.db"), url.replace("/knowtree?", "/bench_save?")):
            print(json.dumps(measure(target, args.nodes)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
