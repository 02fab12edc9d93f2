"""Speed of the offline embedders: load time, passages/s on short and long passages, peak RAM.

Each embedder runs in its own process (so load time and RAM are its own):

    PYTHONPATH=src python benchmarks/bench_embedders.py m2v-minilm minilm static \
        --data ../shared/data --out /tmp/embedder-speed.json

Passages: the first N LoCoMo turns-chunks as the harness builds them (short, ~60 tokens) and the
first N FinanceBench pages (long, ~800 tokens). Threads: onnxruntime gets KNOWTREE_EMBED_THREADS=2.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def passages(data: Path, n: int) -> dict[str, list[str]]:
    from knowtree_eval.datasets import load_financebench, load_locomo

    loco = load_locomo(data / "locomo_dev.json")
    short = [p.text for c in loco.corpora.values() for p in c.passages.values()][:n]
    fb = load_financebench(data / "financebench_dev_questions.jsonl", limit=3)
    long = [p.text for c in fb.corpora.values() for p in c.passages.values()][:n]
    return {"short": short, "long": long}


def one(name: str, data: Path, n: int) -> dict[str, object]:
    texts = passages(data, n)
    started = time.perf_counter()
    from knowtree.retrieve.embed import get_embedder

    emb = get_embedder(name)
    emb.embed(["warm up"])
    out: dict[str, object] = {"embedder": name, "id": emb.id, "dim": emb.dim}
    out["load_s"] = round(time.perf_counter() - started, 2)
    for kind, items in texts.items():
        started = time.perf_counter()
        emb.embed(items)
        elapsed = time.perf_counter() - started
        out[f"{kind}_n"] = len(items)
        out[f"{kind}_chars_mean"] = round(sum(map(len, items)) / max(1, len(items)))
        out[f"{kind}_per_s"] = round(len(items) / elapsed, 1)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+")
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("-n", type=int, default=300, help="passages of each kind")
    parser.add_argument("--out")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.names[0], Path(args.data), args.n)))
        return
    env = {**os.environ, "KNOWTREE_EMBED_THREADS": "2", "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1"}
    rows = []
    for name in args.names:
        cmd = [sys.executable, __file__, name, "--data", args.data, "-n", str(args.n), "--one"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"{name}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(row))
        rows.append(row)
    if args.out:
        Path(args.out).write_text(json.dumps({"load_avg": os.getloadavg(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
