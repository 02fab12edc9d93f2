"""A model call's store writes: the cache row and the ledger row each call leaves, N times, on one
store (a SQLite file or a postgresql:// URL); prints calls/s. What bounds a worker's call rate once
the model is fast (docs/scale.md, "Where the bottleneck moves").

    PYTHONPATH=src python benchmarks/bench_call_rows.py "postgresql://…" --calls 400
    PYTHONPATH=src python benchmarks/bench_call_rows.py /tmp/rows.db --calls 400
"""

from __future__ import annotations

import argparse
import json
import time
import uuid


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db", help="SQLite file or postgresql:// URL")
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args(argv)

    from knowtree.llm.base import Completion
    from knowtree.store import open_store
    from knowtree.types import Usage

    store = open_store(args.db)
    reply = Completion(text="x" * 200, input_tokens=10, output_tokens=5, finish_reason="stop")
    started = time.perf_counter()
    for _ in range(args.calls):
        key = uuid.uuid4().hex
        store.cache_put(key, "bench", reply)
        store.record_call(run_id=None, key=key, model_id="bench", purpose="bench", cached=False,
                          usage=Usage(calls=1), error=None)
    seconds = time.perf_counter() - started
    store.close()
    print(json.dumps({"calls": args.calls, "seconds": round(seconds, 3), "calls_per_s": round(args.calls / seconds)}))


if __name__ == "__main__":
    main()
