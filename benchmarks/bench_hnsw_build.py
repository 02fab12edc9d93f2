"""pgvector HNSW construction settings: build time against the recall of the nearest vectors (issue 37's
save, issue 36's build rate), on real text.

The FinanceBench dev filings (`../shared/data/financebench_dev_pages.jsonl.gz`) are cut into
400-character pieces and embedded with the default embedder; the queries are the dev questions and
200 of the pieces. For each `m:ef_construction` given, the HNSW index is built over the pieces in a
scratch database of the PostgreSQL at `--pg-dir` (`knowtree db start --dir DIR`), on one core
(`max_parallel_maintenance_workers = 0`; the backend at nice 19 so that work beside it keeps its
CPU), and every query's top-k by the index is compared with an exact scan (numpy), with
`hnsw.ef_search` set as knowtree sets it (2k, at least 64).

    PYTHONPATH=src python benchmarks/bench_hnsw_build.py --pg-dir D 16:64 16:32
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"
PIECE = 400


def pieces_and_queries(data: Path, seed: int = 3) -> tuple[list[str], list[str]]:
    texts: list[str] = []
    with gzip.open(data / "financebench_dev_pages.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            for page in json.loads(line)["pages"]:
                texts += [page[i : i + PIECE] for i in range(0, len(page), PIECE) if page[i : i + PIECE].strip()]
    with open(data / "financebench_dev_questions.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["question"] for line in f if line.strip()]
    return texts, queries + random.Random(seed).sample(texts, 200)


def _literal(row: Any) -> str:
    return "[" + ",".join(repr(float(x)) for x in row) + "]"


def run(pg_dir: str, settings: list[tuple[int, int]], data: Path) -> list[dict[str, Any]]:
    import numpy as np
    import psycopg

    from knowtree.retrieve.embed import get_embedder
    from knowtree.store import pgserver

    texts, queries = pieces_and_queries(data)
    embedder = get_embedder(None)
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    asked = np.asarray(embedder.embed(queries), dtype=np.float32)
    exact = np.argsort(-(asked @ vectors.T), axis=1)[:, :100]
    base = pgserver.start(Path(pg_dir))
    with psycopg.connect(base, autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS kt_hnsw_bench")
        c.execute("CREATE DATABASE kt_hnsw_bench")
    head, _, query = base.partition("?")
    url = f"{head.rsplit('/', 1)[0]}/kt_hnsw_bench" + (f"?{query}" if query else "")
    rows = []
    with psycopg.connect(url) as c:
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        subprocess.run(["renice", "-n", "19", "-p", str(pid)], capture_output=True, check=False)
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
        c.execute("CREATE TABLE v (id int, emb vector)")
        with c.cursor().copy("COPY v (id, emb) FROM STDIN") as copy:
            for i, row in enumerate(vectors):
                copy.write_row((i, _literal(row)))
        c.commit()
        c.execute("SET maintenance_work_mem = '1500MB'")
        c.execute("SET max_parallel_maintenance_workers = 0")
        for m, ef_construction in settings:
            c.execute("DROP INDEX IF EXISTS v_hnsw")
            c.commit()
            started = time.perf_counter()
            c.execute(
                f"CREATE INDEX v_hnsw ON v USING hnsw ((emb::vector({vectors.shape[1]})) vector_ip_ops)"
                f" WITH (m = {int(m)}, ef_construction = {int(ef_construction)})"
            )
            c.commit()
            row: dict[str, Any] = {"m": m, "ef_construction": ef_construction, "pieces": len(texts),
                                   "queries": len(queries), "build_s_one_core": round(time.perf_counter() - started, 1)}
            for k in (20, 50, 100):
                ef = max(64, 2 * k)
                c.execute(f"SET hnsw.ef_search = {ef}")
                found = 0
                for qi, q in enumerate(asked):
                    got = c.execute(
                        f"SELECT id FROM v ORDER BY emb::vector({vectors.shape[1]}) <#> %s::vector({vectors.shape[1]})"
                        " LIMIT %s",
                        (_literal(q), k),
                    ).fetchall()
                    found += len({r[0] for r in got} & set(exact[qi, :k].tolist()))
                row[f"recall@{k}_ef{ef}"] = round(found / (k * len(asked)), 4)
            print(json.dumps(row), flush=True)
            rows.append(row)
    with psycopg.connect(base, autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS kt_hnsw_bench")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="+", help="m:ef_construction, e.g. 16:64")
    parser.add_argument("--pg-dir", required=True)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    settings = [(int(a), int(b)) for a, b in (s.split(":") for s in args.settings)]
    rows = run(args.pg_dir, settings, args.data)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
