"""Issue 37's benchmarks: one process vs a Ray cluster on one PostgreSQL, and per-component rates.

    # a build of CHUNKS leaves with the keyword model slowed to a remote model's latency, one process
    # vs --executor ray at each per-process model concurrency, each run in a fresh database (so no run
    # reads another's model-call cache); the trees compared node by node
    .venv/bin/python benchmarks/bench_scale_work.py builds --ray-address 127.0.0.1:6390 \
        --runs 1:2000,8:10000 --model slow:0.05 --out benchmarks/results/scale_work_builds.json

    # a PDF collection built with --summaries none (file reading and parsing on Ray tasks)
    .venv/bin/python benchmarks/bench_scale_work.py pdfs --ray-address 127.0.0.1:6390 --copies 3

    # per-component rates: files parsed/s, pieces embedded/s, store rows written/s (SQLite and
    # PostgreSQL), model calls/s (keyword, slow:0.05 at concurrency 1 and 8)
    .venv/bin/python benchmarks/bench_scale_work.py components

A local PostgreSQL is started in --pg-dir (`knowtree db start`); the Ray cluster must be running
(`ray start --head --port 6390 --num-cpus 1` and `ray start --address 127.0.0.1:6390 --num-cpus 1`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORDS = ("alpha beta gamma delta budget launch review ticket owner deploy cache index invoice region quarter"
         " revenue churn latency outage vendor contract renewal audit policy").split()


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from knowtree.cli.app import main; main()", *args],
                          capture_output=True, text=True, env=env or os.environ.copy(), check=False)


def _pg(directory: Path) -> str:
    from knowtree.store import pgserver

    return pgserver.start(directory)


def _fresh_db(base_url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(base_url, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}"')
        c.execute(f'CREATE DATABASE "{name}"')
    head, _, query = base_url.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


def corpus(root: Path, chunks: int, chunk_size: int = 500, per_doc: int = 10, seed: int = 7) -> Path:
    """Markdown files of `per_doc` chunks of about `chunk_size` characters each: `chunks` leaves."""
    rnd = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for d in range(max(1, chunks // per_doc)):
        words = []
        while len(" ".join(words)) < chunk_size * per_doc - 40:
            words.append(rnd.choice(WORDS))
        (root / f"doc{d:06d}.md").write_text(f"Report {d} of seed {seed}: " + " ".join(words) + "\n")
    return root


def _nodes(url: str, tree: str) -> list[tuple[str, str, str]]:
    out = _cli("show", tree, "--db", url, "--json")
    if out.returncode:
        raise SystemExit(out.stderr)
    return sorted((n["id"], json.dumps(n.get("meta"), sort_keys=True), n.get("text", ""))
                  for n in json.loads(out.stdout)["nodes"])


def _build(url: str, corpus_dir: Path, tree: str, model: str, concurrency: int, *extra: str) -> dict[str, Any]:
    started = time.perf_counter()
    out = _cli("build", str(corpus_dir), "--tree", tree, "--db", url, "--model", model, "--concurrency",
               str(concurrency), "--chunk-size", "500", "--yes", "--quiet", "--json", *extra)
    wall = time.perf_counter() - started
    if out.returncode:
        raise SystemExit(f"build failed: {out.stderr[-2000:]}")
    try:
        report = json.loads(out.stdout)
    except json.JSONDecodeError:  # seen once (concurrency 1, 200k, Ray): keep what came, to find why
        keep = Path(tempfile.mkdtemp(prefix="kt-build-out-"))
        (keep / "stdout.txt").write_text(out.stdout)
        (keep / "stderr.txt").write_text(out.stderr)
        raise SystemExit(f"build printed no JSON report ({len(out.stdout)} characters on stdout): see {keep}") from None
    return {"wall_s": round(wall, 1), "nodes": report["nodes"], "leaves": report["leaves"],
            "calls": report["usage"]["calls"], "cached": report["usage"]["cached"]}


def builds(args: argparse.Namespace) -> dict[str, Any]:
    base = _pg(Path(args.pg_dir))
    rows = []
    for spec in args.runs.split(","):
        concurrency, chunks = (int(x) for x in spec.split(":"))
        with tempfile.TemporaryDirectory() as tmp:
            src = corpus(Path(tmp) / "corpus", chunks)
            one = _fresh_db(base, f"bench_one_{concurrency}")
            two = _fresh_db(base, f"bench_ray_{concurrency}")
            a = _build(one, src, "t", args.model, concurrency)
            b = _build(two, src, "t", args.model, concurrency, "--executor", "ray", "--ray-address", args.ray_address)
            same = _nodes(one, "t") == _nodes(two, "t")
        rows.append({"concurrency": concurrency, "chunks": chunks, "one_process": a, "ray_2_workers": b,
                     "speedup": round(a["wall_s"] / b["wall_s"], 2), "identical_trees": same})
        print(json.dumps(rows[-1]), flush=True)
    return {"benchmark": "one process vs 2 Ray workers, PostgreSQL", "model": args.model, "rows": rows}


def pdfs(args: argparse.Namespace) -> dict[str, Any]:
    """The FinanceBench PDFs (copied `--copies` times under other names, so the collection passes
    1,000 pages), built with --summaries none in one process and on Ray, into SQLite files."""
    from pypdf import PdfReader

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "pdfs"
        src.mkdir()
        pages = 0
        for k in range(args.copies):
            for pdf in sorted(Path(args.pdfs).glob("*.pdf")):
                shutil.copy(pdf, src / f"{pdf.stem}_{k}.pdf")
                pages += len(PdfReader(str(pdf)).pages)
        out = {}
        for label, extra in (("one_process", ()), ("ray_2_workers", ("--executor", "ray", "--ray-address", args.ray_address))):
            url = str(Path(tmp) / f"{label}.db")  # SQLite: PostgreSQL refuses the NUL bytes some PDFs' text holds
            started = time.perf_counter()
            r = _cli("build", str(src), "--tree", "p", "--db", url, "--model", "keyword", "--summaries", "none", "--yes", "--quiet",
                     "--json", *extra)
            if r.returncode:
                raise SystemExit(r.stderr[-2000:])
            out[label] = {"wall_s": round(time.perf_counter() - started, 1), "nodes": json.loads(r.stdout)["nodes"],
                          "url": url}
        same = _nodes(out["one_process"].pop("url"), "p") == _nodes(out["ray_2_workers"].pop("url"), "p")
    return {"benchmark": "PDF collection, --summaries none", "files": len(list(Path(args.pdfs).glob("*.pdf"))) * args.copies,
            "pages": pages, **out, "identical_trees": same}


def components(args: argparse.Namespace) -> dict[str, Any]:
    from knowtree.construct.builder import build_tree
    from knowtree.core import KnowTree
    from knowtree.ingest import load_documents
    from knowtree.ingest.sources import load_sources
    from knowtree.llm.client import LLMClient
    from knowtree.testing.models import KeywordModel

    rates: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = corpus(Path(tmp) / "corpus", 20_000)
        t = time.perf_counter()
        docs = load_documents([str(src)])
        rates["text files read/s"] = round(len(docs) / (time.perf_counter() - t))
        pdf_files = sorted(str(p) for p in Path(args.pdfs).glob("*.pdf"))
        t = time.perf_counter()
        structured = load_sources(pdf_files)
        took = time.perf_counter() - t
        pages = sum(len(s.pages or []) for s in structured)
        rates["PDF pages parsed/s"] = round(pages / took, 1)
        rates["PDF files parsed/s"] = round(len(pdf_files) / took, 2)
        client = LLMClient(KeywordModel())
        result = build_tree(docs, client, taxonomy=[], chunk_size=500, summarize=False)
        rates["leaves"] = result.leaves
        base = _pg(Path(args.pg_dir))
        for backend, db in (("SQLite", str(Path(tmp) / "w.db")), ("PostgreSQL", _fresh_db(base, "bench_rows"))):
            kt = KnowTree(db, model="keyword", read_env=False)
            t = time.perf_counter()
            kt.store.save_tree("t", root_id=result.root_id, nodes=result.nodes, documents=docs, model="keyword",
                               settings={}, kind="document")
            took = time.perf_counter() - t
            rates[f"{backend}: nodes saved/s (with their index rows)"] = round(len(result.nodes) / took)
            print(rates, flush=True)
            if backend == "SQLite":
                t = time.perf_counter()
                pieces = kt.embed_index("t")
                rates["pieces embedded/s (default embedder)"] = round(pieces / (time.perf_counter() - t))
            t = time.perf_counter()
            n = 2000
            for i in range(n):  # one call's store writes: cache row + ledger row, each a transaction
                kt.store.cache_put(f"bench-{i}", "keyword", _completion())
            rates[f"{backend}: cache rows written/s (one transaction each)"] = round(n / (time.perf_counter() - t))
            kt.close()
    return {"benchmark": "per-component rates", "rates": rates}


def calls(args: argparse.Namespace) -> dict[str, Any]:
    """Model calls/s through `LLMClient` (leaf metadata calls, a fresh in-memory cache: no hits)."""
    from concurrent.futures import ThreadPoolExecutor

    from knowtree.construct.builder import leaf_meta
    from knowtree.construct.taxonomy import DEFAULT_TAXONOMY
    from knowtree.llm.client import ClientOptions, LLMClient
    from knowtree.testing.models import KeywordModel, SlowKeywordModel

    rates: dict[str, Any] = {}
    for name, model in (("keyword", KeywordModel()), ("slow:0.05", SlowKeywordModel(0.05))):
        for conc in (1, 8):
            client = LLMClient(model, options=ClientOptions(concurrency=conc))
            n = 400 if name == "keyword" else (40 if conc == 1 else 320)
            texts = [f"Item {i}: " + " ".join(WORDS[(i + k) % len(WORDS)] for k in range(80)) for i in range(n)]

            def one(text: str, client: LLMClient = client) -> Any:
                return leaf_meta(client, text, DEFAULT_TAXONOMY)

            t = time.perf_counter()
            with ThreadPoolExecutor(conc) as pool:
                list(pool.map(one, texts))
            rates[f"model calls/s: {name}, concurrency {conc}"] = round(client.usage.calls / (time.perf_counter() - t), 1)
            print(rates, flush=True)
    return {"benchmark": "model calls/s", "rates": rates}


def _completion() -> Any:
    from knowtree.llm.base import Completion

    return Completion(text='{"title": "x"}', input_tokens=100, output_tokens=20)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=("builds", "pdfs", "components", "calls"))
    p.add_argument("--pg-dir", default="/tmp/kt-bench-pg")
    p.add_argument("--ray-address", default="127.0.0.1:6390")
    p.add_argument("--runs", default="1:2000,8:10000", help="CONCURRENCY:CHUNKS,…")
    p.add_argument("--model", default="slow:0.05")
    p.add_argument("--pdfs", default=str(HERE.parent.parent / "shared" / "data" / "pdfs"))
    p.add_argument("--copies", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args()
    data = {"builds": builds, "pdfs": pdfs, "components": components, "calls": calls}[args.what](args)
    data.update(command=" ".join(["benchmarks/bench_scale_work.py", *sys.argv[1:]]),
                machine=f"{platform.machine()}, {os.cpu_count()} cores (shared)", date=datetime.now(UTC).date().isoformat())
    text = json.dumps(data, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
