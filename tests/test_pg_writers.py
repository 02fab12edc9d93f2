"""Many writers on one PostgreSQL store (issue 36): no lost update, no error, every write readable.

Adders of one memory take turns (`Store.hold_tree`): each reads the state the previous one wrote, so
no message is lost and no position is given out twice. The process test runs
`benchmarks/bench_pg_writers.py` for a few seconds: two CLI builders and two library chatters on one
memory, then reads every write back.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

from knowtree.core import KnowTree

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_pg_writers.py"


def test_concurrent_adds_to_one_memory_lose_no_message(pg_url: str) -> None:
    errors: list[BaseException] = []
    sent: list[str] = []

    def adder(ident: int) -> None:
        kt = KnowTree(pg_url, model="keyword", read_env=False, summaries="none")  # a pool of its own
        try:
            for i in range(6):
                texts = [f"adder {ident} says {i}", f"adder {ident} hears {i}"]
                kt.memory("m").add([{"role": "user", "content": t} for t in texts])
                sent.extend(texts)
        except BaseException as exc:
            errors.append(exc)
        finally:
            kt.store.close()

    threads = [threading.Thread(target=adder, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    kt = KnowTree(pg_url, read_env=False)
    rows = kt.store.load_messages("m")
    assert sorted(str(r["content"]) for r in rows) == sorted(sent)
    assert [r["position"] for r in rows] == list(range(1, len(sent) + 1))
    kt.store.close()


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_pg_writers", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_four_writer_processes_for_a_few_seconds_lose_nothing(pg_url: str) -> None:
    report = _bench().run(pg_url, seconds=5, builders=2, chatters=2)
    assert report["worker_exit_codes"] == [0, 0, 0, 0], report
    assert report["errors"] == 0, report["first_errors"]
    assert report["builds_ok"] >= 2 and report["chat_adds_ok"] >= 2, report
    assert report["missing_count"] == 0, report["missing"]
    assert report["duplicate_messages"] == 0 and report["distinct_positions"], report
    assert report["messages_stored"] == 2 * report["chat_adds_ok"]
