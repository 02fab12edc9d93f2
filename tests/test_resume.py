"""A build killed with SIGKILL and started again repeats no finished model call (the ledger shows it)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys, time
    import knowtree
    from knowtree.testing.models import FunctionModel, KeywordModel

    keyword = KeywordModel()

    def slow(request):
        time.sleep(float(sys.argv[3]))
        return keyword.reply(request)

    kt = knowtree.open(sys.argv[1], model=FunctionModel(slow, id="slow-keyword", max_concurrency=1))
    report = kt.build([sys.argv[2]], tree="t")
    print(report.line())
    """
)


def _ledger(db: Path) -> list[tuple[str, int, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT run_id, cached, key FROM llm_calls ORDER BY seq").fetchall()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_sigkill_then_rerun_repeats_no_finished_call(tmp_path: Path) -> None:
    corpus = tmp_path / "doc.md"
    corpus.write_text(
        "\n\n".join(
            f"Paragraph {i}. Team {i} decided to ship feature {i} on day {i}. " * 3 for i in range(24)
        ),
        encoding="utf-8",
    )
    script = tmp_path / "build.py"
    script.write_text(SCRIPT, encoding="utf-8")
    db = tmp_path / "kb.db"
    env = {**os.environ, "KNOWTREE_CHUNK_SIZE": "200"}

    proc = subprocess.Popen([sys.executable, str(script), str(db), str(corpus), "0.2"], env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if db.exists():
            try:
                if len(_ledger(db)) >= 5:
                    break
            except sqlite3.Error:
                continue
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = _ledger(db)
    assert len(first) >= 5, "the build should have been killed after some calls"
    finished = {run for run, _, _ in first}
    assert len(finished) == 1

    done = subprocess.run(
        [sys.executable, str(script), str(db), str(corpus), "0"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    second = [(cached, key) for run, cached, key in _ledger(db) if run not in finished]
    asked_before = {key for _, _, key in first}
    asked_again = {key for cached, key in second if not cached}
    # every call the killed build finished is answered from the cache, none is asked again
    assert not asked_before & asked_again
    assert sum(cached for cached, _ in second) >= len(first)
    assert done.stdout.strip().endswith(f"{len(asked_again)} LLM calls")
