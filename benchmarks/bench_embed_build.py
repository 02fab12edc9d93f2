"""The build-time cost of the default embedder's vectors: every entry of a built tree index embedded
again as the build embeds it (context + text, cut to `EMBED_CHARS`), timed apart from the build.

    PYTHONPATH=src python benchmarks/bench_embed_build.py --db /tmp/x.db --tree lib100000
    PYTHONPATH=src python benchmarks/bench_embed_build.py --db /tmp/x.db --tree t --check  # vectors == stored

`cold` is a fresh embedder (its files read, nothing cached); `warm` the same embedder again (its word
cache filled). Per 100,000 characters: of what is embedded (each entry's context and text as cut).
Runs on code before `embed_entries` too (it then embeds the joined texts with `embed_texts`).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from typing import Any


def entries(db: str, tree: str) -> list[tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT id, context, text FROM tree_index WHERE tree = ?", (tree,)).fetchall()


def stored(db: str, tree: str, embedder: str) -> dict[str, bytes]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT id, vec FROM tree_index_vec WHERE tree = ? AND embedder = ?", (tree, embedder)
        ).fetchall()
    return dict(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="an SQLite database holding a built tree")
    ap.add_argument("--tree", required=True)
    ap.add_argument("--check", action="store_true", help="compare the vectors with the stored ones")
    args = ap.parse_args(argv)

    import numpy as np

    from knowtree.retrieve import embed, indexwrite

    rows = entries(args.db, args.tree)
    contexts, texts = [r[1] for r in rows], [r[2] for r in rows]
    chars = sum(len(indexwrite.embed_text(c, t)) for c, t in zip(contexts, texts, strict=True))

    def run(emb: Any) -> Any:
        fast = getattr(indexwrite, "embed_entries", None)
        if fast is not None:
            return fast(emb, contexts, texts)
        joined = [indexwrite.embed_text(c, t) for c, t in zip(contexts, texts, strict=True)]
        return indexwrite.embed_texts(emb, joined)

    out: dict[str, Any] = {"entries": len(rows), "chars_embedded": chars}
    started, cpu = time.perf_counter(), time.process_time()
    emb = embed.EMBEDDERS[embed.DEFAULT_EMBEDDER]()  # not the cached one: a cold embedder
    out["load_s"] = round(time.perf_counter() - started, 3)
    vectors = run(emb)
    out["cold_s"] = round(time.perf_counter() - started, 3)
    out["cold_cpu_s"] = round(time.process_time() - cpu, 3)
    started, cpu = time.perf_counter(), time.process_time()
    again = run(emb)
    out["warm_s"] = round(time.perf_counter() - started, 3)
    out["warm_cpu_s"] = round(time.process_time() - cpu, 3)
    out["cold_s_per_100k_chars"] = round(out["cold_s"] * 1e5 / max(chars, 1), 4)
    out["warm_s_per_100k_chars"] = round(out["warm_s"] * 1e5 / max(chars, 1), 4)
    out["entries_per_s_warm"] = round(len(rows) / max(out["warm_s"], 1e-9), 1)
    if args.check:
        have = stored(args.db, args.tree, emb.id)
        got = np.stack([np.frombuffer(have[r[0]], dtype=np.float32) for r in rows])
        out["equal_to_stored"] = bool(np.array_equal(got, vectors) and np.array_equal(vectors, again))
        out["max_abs_diff"] = float(np.abs(got - vectors).max()) if len(rows) else 0.0
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
