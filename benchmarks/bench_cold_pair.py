"""Cold CLI questions of two checkouts, alternating run by run (paired on a shared, noisy machine):
`knowtree ask t Q --mode retrieve --no-answer` on a database `bench_scale_index.py` built (tree `t`),
each checkout's `src` as PYTHONPATH; wall and CPU (user + sys of the child) per run, medians printed.
Bytecode is compiled once, into `--pycache` (as an installed package's is), and one question per
checkout runs first (bytecode, the page cache, the default embedder's verified-file stamp).

    python benchmarks/bench_cold_pair.py W/scale100000.db --runs 7 --src main=/path/main/src --src new=src
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

QUESTIONS = [  # tickets of bench_scale_index.py's corpus
    "What did bob file as tkcbbbb about atlas?",
    "What did erin file as tkkbbbb about garnet?",
    "What did dmitri file as tkgbbbb about atlas?",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("db", help="an SQLite file or a postgresql:// URL holding tree `t`")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--src", action="append", required=True, help="NAME=DIR: a checkout's src directory")
    ap.add_argument("--pycache", default="/tmp/kt-cold-pycache")
    args = ap.parse_args()
    srcs = dict(s.split("=", 1) for s in args.src)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = args.pycache
    cli = str(Path(sys.executable).with_name("knowtree"))
    out: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in srcs}

    def ask(src: str, question: str) -> None:
        subprocess.run(
            [cli, "ask", "t", question, "--db", args.db, "--model", "keyword", "--mode", "retrieve", "--no-answer"],
            env={**env, "PYTHONPATH": src},
            check=True,
            stdout=subprocess.DEVNULL,
        )

    for src in srcs.values():
        ask(src, QUESTIONS[0])
    loads = [os.getloadavg()[0]]
    for i in range(args.runs):
        order = list(srcs.items()) if i % 2 == 0 else list(srcs.items())[::-1]
        for name, src in order:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            ask(src, QUESTIONS[i % len(QUESTIONS)])
            out[name]["wall"].append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            out[name]["cpu"].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    loads.append(os.getloadavg()[0])
    for name, r in out.items():
        row = {
            "code": name,
            "db": args.db.split("?")[0],
            "runs": args.runs,
            "wall_median_s": round(statistics.median(r["wall"]), 3),
            "wall_range_s": [round(min(r["wall"]), 2), round(max(r["wall"]), 2)],
            "cpu_median_s": round(statistics.median(r["cpu"]), 3),
            "load": [round(x, 2) for x in loads],
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
