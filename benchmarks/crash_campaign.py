"""Crash campaign: kill `knowtree build` and `knowtree chat add` with SIGKILL at random points, run them
again, and check what the database holds after every completed rerun.

For each (command, model) pair, trials run on a fresh database: the command is started and killed
after a random delay, up to `--chain` times in a row (a kill can land in a rerun), then run to the
end. After each trial:

* no repeated finished model call: no cache key appears twice among the ledger's non-cached calls
  (a finished call is cached before it is recorded, so a rerun must get it from the cache);
* no lost or duplicated node or message: the tree equals the one an uninterrupted run builds (same
  node ids, the same parent of every node; for a memory, the same messages at the same positions,
  each pointing at a stored node);
* `PRAGMA integrity_check` and the full-text index check are ok;
* `knowtree ledger` shows no run 'running' (the killed ones show as 'interrupted'; in the table a
  killed run stays 'running' until the next run in that database marks it, and a rerun that finds
  nothing new starts no run).

Usage (about 12 minutes of CPU on 2 cores):
    PYTHONPATH=src python benchmarks/crash_campaign.py --kills 50 --out benchmarks/results/crash_campaign.json
Inputs are generated (no data set needed). Every subprocess is started and killed by this script only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from knowtree.store import SQLiteStore
from knowtree.store.guard import full_check

WORDS = (
    "harbour keeper lantern storm ledger ferry cargo tide beacon rope anchor gull pier dawn fog "
    "signal crew north south timber coal salt net map compass bell island reef channel buoy"
).split()


def corpus(folder: Path, files: int, paragraphs: int, rnd: random.Random) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        text = "\n\n".join(
            f"Record {f}-{p}: " + " ".join(rnd.choice(WORDS) for _ in range(40)) + f" (entry {f * 1000 + p})."
            for p in range(paragraphs)
        )
        (folder / f"part{f:02d}.md").write_text(f"# Part {f}\n\n{text}\n", encoding="utf-8")


def chat(path: Path, messages: int, rnd: random.Random) -> None:
    rows = []
    for i in range(messages):
        rows.append(
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "name": "Ann" if i % 2 == 0 else None,
                "content": f"Message {i}: " + " ".join(rnd.choice(WORDS) for _ in range(14)),
                "timestamp": 1709287200 + 600 * i,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@dataclass
class Trial:
    command: str
    model: str
    kills: int = 0
    kills_mid_work: int = 0  # kills after at least one model call of that attempt was recorded
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def argv(command: str, model: str, db: Path, work: Path) -> list[str]:
    base = [sys.executable, "-c", "from knowtree.cli.app import main; main()"]
    if command == "build":
        return [
            *base,
            "build",
            str(work / "docs"),
            "--tree",
            "t",
            "--db",
            str(db),
            "--model",
            model,
            "-q",
            "--yes",
        ]
    return [*base, "chat", "add", "m", str(work / "chat.jsonl"), "--db", str(db), "--model", model, "-q"]


def env(work: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("KNOWTREE_", "OPENAI_", "ANTHROPIC_"))}
    return {
        **keep,
        "KNOWTREE_CHUNK_SIZE": "400",
        "KNOWTREE_CONCURRENCY": "4",
        "XDG_CONFIG_HOME": str(work / "xdg"),
    }


def ledger_count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as c:
            return c.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0]
    except sqlite3.Error:
        return 0


def run_to_end(cmd: list[str], environ: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=environ, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


def snapshot(db: Path, command: str) -> dict[str, object]:
    """What the database holds: node ids with their parents, and (memories) the messages."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        tree = "t" if command == "build" else "m"
        nodes = {r[0]: r[1] for r in c.execute("SELECT id, parent FROM nodes WHERE tree = ?", (tree,))}
        total = c.execute("SELECT COUNT(*) FROM nodes WHERE tree = ?", (tree,)).fetchone()[0]
        messages = c.execute(
            "SELECT position, role, content, node_id FROM messages WHERE tree = ? ORDER BY position", (tree,)
        ).fetchall()
        docs = c.execute(
            "SELECT path, sha256 FROM documents WHERE tree = ? ORDER BY path", (tree,)
        ).fetchall()
    return {"nodes": nodes, "node_rows": total, "messages": messages, "documents": docs}


def check(db: Path, command: str, reference: dict[str, object], trial: Trial) -> None:
    problems = trial.problems
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        repeated = c.execute(
            "SELECT key, COUNT(*) FROM llm_calls WHERE cached = 0 AND error IS NULL GROUP BY key HAVING COUNT(*) > 1"
        ).fetchall()
    if repeated:
        problems.append(f"{len(repeated)} finished model call(s) made again")
    store = SQLiteStore(str(db))  # what `knowtree ledger` shows: a killed run is 'interrupted'
    try:
        running = sum(1 for r in store.runs(limit=100_000) if r["status"] == "running")
    finally:
        store.close()
    if running:
        problems.append(f"{running} run(s) left 'running'")
    report = full_check(str(db))
    problems += [f"check: {p}" for p in report.problems]
    got = snapshot(db, command)
    if got["node_rows"] != len(got["nodes"]):  # type: ignore[arg-type]
        problems.append("duplicated node rows")
    if command == "build":
        if got["nodes"] != reference["nodes"]:
            problems.append(
                f"tree differs from the uninterrupted build ({len(got['nodes'])} vs {len(reference['nodes'])} nodes)"
            )  # type: ignore[arg-type]
        if got["documents"] != reference["documents"]:
            problems.append("documents differ")
        return
    msgs = got["messages"]
    ref = reference["messages"]
    if [m[:3] for m in msgs] != [m[:3] for m in ref]:  # type: ignore[union-attr,index]
        problems.append(f"messages differ ({len(msgs)} stored vs {len(ref)} expected)")  # type: ignore[arg-type]
    nodes = got["nodes"]
    if any(m[3] not in nodes for m in msgs):  # type: ignore[union-attr,operator]
        problems.append("a message points at a missing node")


def timed_reference(cmd: list[str], environ: dict[str, str], work: Path, db: Path) -> tuple[float, float]:
    """Run once to the end; returns (seconds to the first recorded model call, seconds in all)."""
    began = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=environ, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    first = 0.0
    while proc.poll() is None:
        if not first and ledger_count(db):
            first = time.monotonic() - began
        time.sleep(0.05)
    full = time.monotonic() - began
    if proc.returncode != 0:
        raise SystemExit(f"reference run failed: {proc.stderr.read()[-500:] if proc.stderr else ''}")
    return first or full / 2, full


def kill_delay(rnd: random.Random, first_s: float, full_s: float) -> float:
    """Most kills land while model calls are being made and stored; some during start-up."""
    if rnd.random() < 0.85:
        return rnd.uniform(max(0.1, first_s - 0.1), full_s)
    return rnd.uniform(0.1, max(0.2, first_s))


def trial(
    command: str,
    model: str,
    work: Path,
    reference: dict[str, object],
    times: tuple[float, float],
    rnd: random.Random,
    chain: int,
    index: int,
) -> Trial:
    t = Trial(command, model)
    started = time.monotonic()
    db = work / f"{command}-{model.replace(':', '_')}-{index}.db"
    cmd = argv(command, model, db, work)
    environ = env(work)
    for _ in range(rnd.randint(1, chain)):
        before = ledger_count(db)
        proc = subprocess.Popen(
            cmd, env=environ, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        delay = kill_delay(rnd, *times)
        try:
            proc.wait(timeout=delay)
            break  # finished before the kill: the chain ends here
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            t.kills += 1
            if ledger_count(db) > before:
                t.kills_mid_work += 1
    done = run_to_end(cmd, environ, work)
    if done.returncode != 0:
        t.problems.append(f"rerun failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    else:
        check(db, command, reference, t)
    db.unlink(missing_ok=True)
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    t.seconds = time.monotonic() - started
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=50, help="kills per command and model, at least")
    ap.add_argument("--models", default="keyword,slow:0.1")
    ap.add_argument("--commands", default="build,chat")
    ap.add_argument("--chain", type=int, default=3, help="kills in a row before a run to the end, at most")
    ap.add_argument("--files", type=int, default=6)
    ap.add_argument("--paragraphs", type=int, default=12)
    ap.add_argument("--messages", type=int, default=300)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    results: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="kt-crash-") as tmp:
        work = Path(tmp)
        corpus(work / "docs", args.files, args.paragraphs, random.Random(args.seed))
        chat(work / "chat.jsonl", args.messages, random.Random(args.seed))
        for command in args.commands.split(","):
            for model in args.models.split(","):
                ref_db = work / f"reference-{command}.db"
                times = timed_reference(argv(command, model, ref_db, work), env(work), work, ref_db)
                reference = snapshot(ref_db, command)
                ref_calls = ledger_count(ref_db)
                for leftover in (ref_db, Path(f"{ref_db}-wal"), Path(f"{ref_db}-shm")):
                    leftover.unlink(missing_ok=True)
                kills = mid = trials = 0
                problems: list[str] = []
                while kills < args.kills:
                    t = trial(command, model, work, reference, times, rnd, args.chain, trials)
                    trials += 1
                    kills += t.kills
                    mid += t.kills_mid_work
                    problems += [f"trial {trials}: {p}" for p in t.problems]
                row = {
                    "command": "chat add" if command == "chat" else command,
                    "model": model,
                    "uninterrupted_s": round(times[1], 2),
                    "first_call_s": round(times[0], 2),
                    "uninterrupted_calls": ref_calls,
                    "trials": trials,
                    "kills": kills,
                    "kills_mid_work": mid,
                    "problems": problems,
                }
                results.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}, indent=2) + "\n")
    bad = sum(len(r["problems"]) for r in results)  # type: ignore[arg-type]
    print(f"crash campaign: {sum(r['kills'] for r in results)} kills, {bad} problem(s)")  # type: ignore[misc]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
