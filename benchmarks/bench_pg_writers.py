"""Many processes writing to one PostgreSQL store at once (issue 36): builders run the CLI
(`knowtree build … --db URL --model keyword --summaries none`, each build a new tree of new files)
and chatters add messages to ONE shared memory through the library (`Memory.add`, two messages at a
time), all for `--seconds`. Then every write is read back: each build that reported success has its
tree with its documents, and the memory holds every message a chatter was told was stored, once,
at distinct positions. Prints a JSON report; exits 1 on any error or anything missing.

    PYTHONPATH=src python benchmarks/bench_pg_writers.py --dir /tmp/pg-bench --seconds 60
    PYTHONPATH=src python benchmarks/bench_pg_writers.py --db postgresql://… --seconds 60

`--dir` starts (or reuses) a local PostgreSQL there (`knowtree db start --dir`); `--db` uses a
database given by URL (it should be empty: the trees and the memory are made here).

`--servers N` starts N `knowtree serve --db URL` processes and makes the chatters add over HTTP
(`POST /v1/memories/NAME/messages`, chatter i to server i mod N, each add with an idempotency key):
the issue's "two `serve`, two CLI builds" is `--servers 2 --builders 2 --chatters 2`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MEMORY = "shared-chat"


def _knowtree() -> list[str]:
    return [sys.executable, "-c", "from knowtree.cli.app import main; main()"]


def builder(url: str, ident: int, seconds: float, log: Path, tag: str) -> None:
    """Build new trees from new files until the time is up; log each build's outcome."""
    deadline = time.monotonic() + seconds
    work = Path(tempfile.mkdtemp(prefix=f"kt-builder{ident}-"))
    round_ = 0
    with log.open("a", encoding="utf-8") as out:
        while time.monotonic() < deadline:
            docs = work / f"r{round_}"
            docs.mkdir()
            for j in range(3):
                (docs / f"d{j}.txt").write_text(
                    f"Builder {ident} round {round_} document {j}: the lighthouse keeper logged "
                    f"{round_ * 10 + j} ships and calm weather.\n",
                    encoding="utf-8",
                )
            tree = f"b{tag}-{ident}-{round_}"
            started = time.monotonic()
            done = subprocess.run(
                [*_knowtree(), "build", str(docs), "--tree", tree, "--db", url, "--model", "keyword",
                 "--summaries", "none"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            out.write(json.dumps({
                "kind": "build", "tree": tree, "documents": 3, "ok": done.returncode == 0,
                "seconds": time.monotonic() - started, "error": done.stderr[-500:] if done.returncode else "",
            }) + "\n")  # fmt: skip
            out.flush()
            round_ += 1
    shutil.rmtree(work, ignore_errors=True)


def _chat(ident: int, seconds: float, log: Path, tag: str, add: Callable[[list[dict[str, str]], str], str]) -> None:
    """Two messages at a time until the time is up, each add logged; `add(messages, key)` stores them
    and returns its error ("" when stored)."""
    deadline = time.monotonic() + seconds
    i = 0
    with log.open("a", encoding="utf-8") as out:
        while time.monotonic() < deadline:
            texts = [f"run {tag} chatter {ident} message {i} asks about harbour {i}", f"run {tag} chatter {ident} message {i + 1} answers"]
            started = time.monotonic()
            error = add([{"role": "user", "content": texts[0]}, {"role": "assistant", "content": texts[1]}],
                        f"{tag}-{ident}-{i}")  # fmt: skip
            out.write(json.dumps({
                "kind": "chat", "texts": texts, "ok": not error, "seconds": time.monotonic() - started, "error": error,
            }) + "\n")  # fmt: skip
            out.flush()
            i += 2


def chatter(url: str, ident: int, seconds: float, log: Path, tag: str) -> None:
    """Add two messages at a time to the shared memory through the library until the time is up."""
    from knowtree.core import KnowTree

    kt = KnowTree(url, model="keyword", read_env=False, summaries="none")

    def add(messages: list[dict[str, str]], _key: str) -> str:
        try:
            kt.memory(MEMORY).add(messages)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"[:500]
        return ""

    try:
        _chat(ident, seconds, log, tag, add)
    finally:
        kt.store.close()


def http_chatter(base: str, ident: int, seconds: float, log: Path, tag: str) -> None:
    """`chatter` through a server: two messages per POST, each with an idempotency key."""
    import httpx

    with httpx.Client(base_url=base, timeout=120) as client:

        def add(messages: list[dict[str, str]], key: str) -> str:
            try:
                r = client.post(f"/v1/memories/{MEMORY}/messages", json={"messages": messages},
                                headers={"Idempotency-Key": key})  # fmt: skip
            except httpx.HTTPError as exc:
                return f"{type(exc).__name__}: {exc}"[:500]
            return "" if r.status_code in (200, 201) else f"HTTP {r.status_code}: {r.text[:400]}"

        _chat(ident, seconds, log, tag, add)


def start_servers(url: str, count: int, env: dict[str, str], logs: Path) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    """`count` `knowtree serve` processes on the store, each once it answers /v1/health."""
    import socket

    import httpx

    procs, bases = [], []
    for i in range(count):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        out = open(logs / f"serve{i}.log", "ab")  # noqa: SIM115
        procs.append(subprocess.Popen(
            [*_knowtree(), "serve", "--db", url, "--model", "keyword", "--port", str(port)],
            env={**env, "KNOWTREE_SUMMARIES": "none"}, stdout=out, stderr=out,
        ))  # fmt: skip
        bases.append(f"http://127.0.0.1:{port}")
    for proc, base in zip(procs, bases, strict=True):
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"a server exited ({proc.returncode}) before answering: see {logs}")
            try:
                if httpx.get(f"{base}/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"a server did not answer in 120 s: see {logs}")
            time.sleep(0.2)
    return procs, bases


def verify(url: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Read every logged write back."""
    from knowtree.store import open_store

    store = open_store(url)
    missing: list[str] = []
    for r in (r for r in records if r["kind"] == "build" and r["ok"]):
        if not store.tree_exists(r["tree"]) or store.tree_info(r["tree"]).documents != r["documents"]:
            missing.append(f"tree {r['tree']}")
    rows = store.load_messages(MEMORY) if store.tree_exists(MEMORY) else []
    contents = [str(row["content"]) for row in rows]
    positions = [int(row["position"]) for row in rows]  # type: ignore[call-overload]
    wanted = [t for r in records if r["kind"] == "chat" and r["ok"] for t in r["texts"]]
    tag = wanted[0].split()[1] if wanted else ""
    contents = [c for c in contents if c.split()[1:2] == [tag]]  # this run's (a reused database keeps older ones)
    missing += [f"message {t!r}" for t in wanted if t not in contents]
    duplicated = len(contents) - len(set(contents))
    store.close()
    return {
        "missing": missing[:20],
        "missing_count": len(missing),
        "messages_stored": len(contents),
        "duplicate_messages": duplicated,
        "distinct_positions": len(set(positions)) == len(positions),
    }


def run(url: str, seconds: float, builders: int, chatters: int, servers: int = 0) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="kt-writers-"))
    tag = logs.name.rsplit("-", 1)[-1]
    import knowtree

    # the workers (and the CLI they run) import this knowtree, whatever the working directory
    here = str(Path(knowtree.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH", "")) if p
    )}  # fmt: skip
    procs = []
    served, bases = start_servers(url, servers, env, logs) if servers else ([], [])
    started = time.monotonic()
    try:
        for kind, count in (("build", builders), ("chat", chatters)):
            for i in range(count):
                target = ["--base", bases[i % len(bases)]] if kind == "chat" and bases else ["--db", url]
                procs.append(subprocess.Popen(
                    [sys.executable, __file__, "--worker", kind, "--id", str(i), *target, "--seconds", str(seconds),
                     "--log", str(logs / f"{kind}{i}.jsonl"), "--tag", tag],
                    env=env,
                ))  # fmt: skip
        codes = [p.wait() for p in procs]
        wall = time.monotonic() - started
    finally:
        servers_up = [proc.poll() is None for proc in served]  # none died while the writers ran
        for proc in served:
            proc.terminate()
            proc.wait(30)
    records = [json.loads(line) for f in sorted(logs.glob("*.jsonl")) for line in f.read_text().splitlines()]
    shutil.rmtree(logs, ignore_errors=True)
    errors = [r["error"] for r in records if not r["ok"]]
    report = {
        "seconds": seconds,
        "wall_s": round(wall, 1),
        "builders": builders,
        "chatters": chatters,
        "servers": servers,
        "chat_through": "HTTP (knowtree serve)" if servers else "the library",
        "worker_exit_codes": codes,
        "servers_up_to_the_end": servers_up,
        "builds_ok": sum(1 for r in records if r["kind"] == "build" and r["ok"]),
        "chat_adds_ok": sum(1 for r in records if r["kind"] == "chat" and r["ok"]),
        "errors": len(errors),
        "first_errors": errors[:3],
        **verify(url, records),
    }
    for kind in ("build", "chat"):
        times = sorted(r["seconds"] for r in records if r["kind"] == kind and r["ok"])
        if times:
            report[f"{kind}_p50_s"] = round(times[len(times) // 2], 3)
            report[f"{kind}_max_s"] = round(times[-1], 3)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="postgresql:// URL of an empty database")
    parser.add_argument("--dir", help="start (or reuse) a local PostgreSQL with its data here")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--builders", type=int, default=2)
    parser.add_argument("--chatters", type=int, default=2)
    parser.add_argument("--servers", type=int, default=0, help="knowtree serve processes the chatters add through")
    parser.add_argument("--base", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=["build", "chat"], help=argparse.SUPPRESS)
    parser.add_argument("--id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        if args.worker == "chat" and args.base:
            http_chatter(args.base, args.id, args.seconds, Path(args.log), args.tag)
        else:
            (builder if args.worker == "build" else chatter)(args.db, args.id, args.seconds, Path(args.log), args.tag)
        return 0
    url = args.db
    if url is None:
        if args.dir is None:
            parser.error("give --db URL or --dir DIR")
        from knowtree.store import pgserver

        url = pgserver.start(args.dir, say=lambda line: print(line, file=sys.stderr))
    report = run(url, args.seconds, args.builders, args.chatters, args.servers)
    print(json.dumps(report, indent=2))
    bad = report["errors"] or report["missing_count"] or report["duplicate_messages"] or not report["distinct_positions"]
    return 1 if bad or any(report["worker_exit_codes"]) or not all(report["servers_up_to_the_end"]) else 0


if __name__ == "__main__":
    sys.exit(main())
