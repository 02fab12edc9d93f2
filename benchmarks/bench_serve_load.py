"""Load benchmark: N concurrent clients for T seconds against `knowtree serve` on 127.0.0.1.

The server is the real CLI (`knowtree serve`, uvicorn, one process) with the keyword model, over the
shipped sample corpus (built first with `knowtree build`) and a conversation memory. Each client runs a
bounded loop (until the deadline or --max-requests) of a fixed mix: retrieve 40 %, show a node 30 %,
ask 20 %, add a message 10 % (each client adds to one of 8 memories). Reports throughput, p50/p99
latency per operation and errors (any non-2xx or transport error).

    .venv/bin/python benchmarks/bench_serve_load.py --clients 200 --seconds 60 --out benchmarks/results/serve_load.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp  # the load generator: much less CPU per request than httpx on a shared 2-core machine
import httpx

MIX = [("retrieve", 40), ("show", 30), ("ask", 20), ("add", 10)]
QUESTIONS = [
    "Which database did the team choose for Lighthouse?",
    "On which days are production deploys allowed?",
    "Who owns the ticket export?",
    "What happens when a deploy fails?",
    "When is the next release planned?",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), 0 elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def client(i: int, base: str, leaves: list[str], deadline: float, max_requests: int,
                 out: dict[str, list[float]], errors: dict[str, int], http: aiohttp.ClientSession) -> None:
    rng = random.Random(i)
    ops = [op for op, weight in MIX for _ in range(weight)]
    for n in range(max_requests):
        if time.monotonic() >= deadline:
            return
        op = rng.choice(ops)
        if op == "retrieve":
            method, url, body = "POST", f"{base}/v1/trees/sample/retrieve", {"question": rng.choice(QUESTIONS), "budget_tokens": 400}
        elif op == "show":
            method, url, body = "GET", f"{base}/v1/trees/sample/nodes/{rng.choice(leaves)}", None
        elif op == "ask":
            method, url, body = "POST", f"{base}/v1/trees/sample/ask", {"question": rng.choice(QUESTIONS)}
        else:
            msg = {"role": "user", "name": f"user{i}", "content": f"Note {n} from client {i}: the harbour light is green."}
            method, url, body = "POST", f"{base}/v1/memories/mem{i % 8}/messages", {"messages": [msg]}
        started = time.monotonic()
        try:
            async with http.request(method, url, json=body) as r:
                await r.read()
                ok = 200 <= r.status < 300
        except (TimeoutError, aiohttp.ClientError):
            ok = False
        elapsed = time.monotonic() - started
        if ok:
            out[op].append(elapsed)
        else:
            errors[op] = errors.get(op, 0) + 1


async def run(base: str, clients: int, seconds: float, max_requests: int) -> dict[str, object]:
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as http:
        async with http.get(f"{base}/v1/trees/sample") as r:
            outline = await r.json()
        leaves = [c["id"] for c in outline["root"]["children"]] + [outline["root"]["id"]]
        out: dict[str, list[float]] = {op: [] for op, _ in MIX}
        errors: dict[str, int] = {}
        started = time.monotonic()
        deadline = started + seconds
        await asyncio.gather(*(client(i, base, leaves, deadline, max_requests, out, errors, http) for i in range(clients)))
        wall = time.monotonic() - started
    total = sum(len(v) for v in out.values())
    return {
        "clients": clients,
        "seconds": round(wall, 1),
        "requests_ok": total,
        "errors": sum(errors.values()),
        "errors_by_op": errors,
        "throughput_rps": round(total / wall, 1),
        "ops": {
            op: {"n": len(v), "p50_ms": round(_percentile(v, 0.50) * 1000, 1), "p99_ms": round(_percentile(v, 0.99) * 1000, 1)}
            for op, v in out.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-requests", type=int, default=100_000, help="per client (bounded loops)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    exe = shutil.which("knowtree", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if exe is None:
        sys.exit("knowtree is not installed in this environment")
    work = Path(tempfile.mkdtemp(prefix="kt-load-"))
    env = {**os.environ, "KNOWTREE_MODEL": "keyword"}
    db = str(work / "load.db")
    subprocess.run([exe, "sample", str(work / "lighthouse")], check=True, env=env, capture_output=True)
    subprocess.run([exe, "build", str(work / "lighthouse"), "--tree", "sample", "--db", db, "--quiet"], check=True, env=env,
                   capture_output=True, cwd=work)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([exe, "serve", "--port", str(port), "--db", db, "--log-level", "warning"], env=env,
                              stdout=subprocess.DEVNULL, stderr=open(work / "serve.log", "wb"), cwd=work)  # noqa: SIM115
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{base}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        cpu0 = _cpu_seconds(server.pid)
        mine0 = time.process_time()
        result = asyncio.run(run(base, args.clients, args.seconds, args.max_requests))
        server_cpu = _cpu_seconds(server.pid) - cpu0
        result["server_cpu_s"] = round(server_cpu, 1)
        result["client_cpu_s"] = round(time.process_time() - mine0, 1)
        ok = int(result["requests_ok"]) or 1  # type: ignore[call-overload]
        result["server_cpu_ms_per_request"] = round(server_cpu / ok * 1000, 2)
    finally:
        server.terminate()
        server.wait(30)
    result["machine"] = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    result["load_average_after"] = [round(x, 1) for x in os.getloadavg()]
    result["command"] = "python benchmarks/bench_serve_load.py " + " ".join(sys.argv[1:])
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
