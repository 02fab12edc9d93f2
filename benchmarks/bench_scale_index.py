"""E9 (issue 36): retrieval whose cost does not grow with the corpus, on synthetic short leaves.

A corpus of `--leaves` short leaves (~300 characters, like ticket lines or chat messages) is
written as `--files` Markdown files of many `##` sections each (one section, one leaf: the zero-call
build's structure with `--structure headings`), built with the keyword model and `--summaries none`
(no model call; the index and the default embedder's vectors are written in the build's save), then:

- build s: the `knowtree build` process's wall time; embed s: what of it the vectors took
  (`SyncReport.embedded` entries, timed by embedding the same texts again);
- warm `Tree.retrieve` p50/p99 over `--questions` distinct questions (each names one leaf's unique
  ticket code, its person and project), after one warm-up question;
- recall@budget of the leaf each question names;
- a cold CLI question: `knowtree ask TREE Q --mode retrieve --no-answer` in a new process (wall), the
  package's bytecode compiled first, as an install has it (`compile_bytecode`);
- the answering process's peak RSS (ru_maxrss) and the database's size on disk.

    PYTHONPATH=src python benchmarks/bench_scale_index.py --leaves 10000 100000 --out benchmarks/results/scale_index.json
    PYTHONPATH=src python benchmarks/bench_scale_index.py --leaves 10000 --pg-dir /tmp/kt-e9-pg   # PostgreSQL

`--pg-dir DIR`: the corpus goes into a PostgreSQL (`knowtree db start --dir DIR`, one database per
size); disk is then `pg_database_size`.

`--reuse`: questions only, on the database an earlier run built in `--work` (SQLite: `scale<N>.db`) or
on the PostgreSQL of `--pg-dir` (database `e9_<N>`): no build, no embedding (a 10^5 build takes
minutes); `--cold-runs` cold CLI questions (median, min and max reported).

    PYTHONPATH=src python benchmarks/bench_scale_index.py --leaves 100000 --work W --reuse --cold-runs 5

`--build-only`: the build's numbers alone (wall s, leaves/s, the build process's CPU and peak RSS,
and on PostgreSQL the server's CPU over the build), on a fresh database each run: for A/B pairs of
two checkouts on a machine whose speed drifts.

    PYTHONPATH=src python benchmarks/bench_scale_index.py --leaves 100000 --files 400 --work W --build-only
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PEOPLE = "alice bob carol dmitri erin farah gustav hana ivan jun kemal lena".split()
PROJECTS = "atlas beacon cobalt delta ember falcon garnet harbor iris juniper".split()
WORDS = (
    "customer reported error login page timeout invoice export billing refund shipping delay warehouse "
    "printer driver update password reset account locked database backup restore failed queue worker "
    "latency spike dashboard chart missing report schedule meeting agenda release notes rollback patch "
    "security audit certificate expired renewal vendor contract pricing discount trial upgrade plan"
).split()


def code(i: int) -> str:
    """A unique ticket code per leaf (letters: one BM25 term, not split by the tokenizer)."""
    letters = "bcdfghjklmnpqrstvwxz"
    out = ""
    n = i
    for _ in range(5):
        out += letters[n % 20]
        n //= 20
    return "tk" + out


def write_corpus(directory: Path, leaves: int, files: int, seed: int = 11) -> list[dict[str, Any]]:
    """`files` Markdown files holding `leaves` sections of ~300 characters; returns each leaf's facts."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    facts: list[dict[str, Any]] = []
    per = -(-leaves // files)
    for f in range(files):
        lines = [f"# Tickets batch {f}", ""]
        for j in range(per):
            i = f * per + j
            if i >= leaves:
                break
            person, project = rng.choice(PEOPLE), rng.choice(PROJECTS)
            body = " ".join(rng.choice(WORDS) for _ in range(30))
            text = f"{person.title()} filed {code(i)} on {project}: {body}."
            lines += [f"## Ticket {i}", "", text, ""]
            facts.append({"i": i, "code": code(i), "person": person, "project": project, "file": f})
        (directory / f"batch{f:04d}.md").write_text("\n".join(lines), encoding="utf-8")
    return facts


def questions(facts: list[dict[str, Any]], n: int, seed: int = 5) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    picked = rng.sample(facts, min(n, len(facts)))
    return [(f"What did {f['person']} file as {f['code']} about {f['project']}?", f["code"]) for f in picked]


def kt_cli() -> str:
    return str(Path(sys.executable).with_name("knowtree"))


def build(db: Path | str, corpus: Path) -> tuple[float, dict[str, float]]:
    """The build's wall seconds, and its process's own CPU seconds and peak RSS (GNU time's `%M`:
    the `knowtree build` child's ru_maxrss, time's own RSS at its fork being tiny)."""
    command = [
        kt_cli(),
        "build",
        str(corpus),
        "--tree",
        "t",
        "--db",
        str(db),
        "--model",
        "keyword",
        "--summaries",
        "none",
        "--structure",
        "headings",
        "-q",
    ]
    measured: dict[str, float] = {}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        timed = Path("/usr/bin/time").exists()
        if timed:
            command = ["/usr/bin/time", "-f", "%M %U %S", "-o", report.name, *command]
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - started
        if timed:
            rss_kb, user, system = Path(report.name).read_text().split()[-3:]
            measured = {"build_rss_mb": round(int(rss_kb) / 1024, 1), "build_cpu_s": round(float(user) + float(system), 1)}
    return seconds, measured


def server_cpu_s(pg_dir: str) -> float:
    """CPU seconds (user + system, its exited children's included) of the PostgreSQL whose data lives
    in `pg_dir`: its postmaster and every process it started (Linux /proc; 0 where unreadable)."""
    try:
        postmaster = Path(pg_dir, "postmaster.pid").read_text().split()[0]
    except (OSError, IndexError):
        return 0.0
    ticks = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if postmaster in (pid, fields[1]):  # fields[1]: the parent's pid
            ticks += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def embed_seconds(db: Path | str, sample: int = 0) -> float:
    """The default embedder's time over the index's texts (what the build's sync spent embedding);
    with `sample`, that many texts are timed (a random sample) and the time scaled to them all."""
    from knowtree.retrieve.embed import get_embedder
    from knowtree.retrieve.treeindex import EMBED_CHARS, embed_texts
    from knowtree.store import open_store

    store = open_store(str(db), create=False)
    total = store.read(lambda c: c.execute("SELECT COUNT(*) FROM tree_index WHERE tree = 't'").fetchone()[0])
    limit = f" ORDER BY random() LIMIT {int(sample)}" if sample and sample < total else ""
    rows = store.read(lambda c: c.execute(f"SELECT text, context FROM tree_index WHERE tree = 't'{limit}").fetchall())
    store.close()
    texts = [((c + "\n" + t) if c else t)[:EMBED_CHARS] for t, c in rows]
    emb = get_embedder()
    started = time.perf_counter()
    embed_texts(emb, texts)
    return (time.perf_counter() - started) * (total / len(texts) if texts else 1.0)


def warm(db: Path | str, qs: list[tuple[str, str]], budget: int) -> dict[str, Any]:
    """Run in a child process: one KnowTree answering every question (a server's process)."""
    from knowtree.core import KnowTree
    from knowtree.testing.models import KeywordModel

    times = []
    hits = 0
    with KnowTree(db, model=KeywordModel()) as kt:
        tree = kt.tree("t")
        started = time.perf_counter()
        tree.retrieve(qs[0][0], budget_tokens=budget)
        first = time.perf_counter() - started
        for q, want in qs:
            started = time.perf_counter()
            ev = tree.retrieve(q, budget_tokens=budget)
            times.append(time.perf_counter() - started)
            hits += any(want in e.text for e in ev)
    times.sort()
    return {
        "first_retrieve_s": round(first, 4),
        "p50_ms": round(1000 * statistics.median(times), 1),
        "p99_ms": round(1000 * times[min(len(times) - 1, int(0.99 * len(times)))], 1),
        "recall": round(hits / len(qs), 3),
        "rss_mb": round(peak_rss_kb() / 1024, 1),
    }


def peak_rss_kb() -> int:
    """This process's peak RSS (VmHWM: its own memory since exec; `ru_maxrss` also keeps the parent's
    RSS at the fork, which made the bench report the parent's 0.9-1.6 GB after `embed_seconds`)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def cold(db: Path | str, question: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        [
            kt_cli(),
            "ask",
            "t",
            question,
            "--db",
            str(db),
            "--model",
            "keyword",
            "--mode",
            "retrieve",
            "--no-answer",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def compile_bytecode() -> None:
    """Write the bytecode of the knowtree package that is imported, as `pip install` does. Without it,
    a checkout run under PYTHONDONTWRITEBYTECODE=1 (which this machine sets) compiles every module it
    imports on each start: 77 modules, 0.14-0.25 s of a cold question, which an installed package
    does not pay. Cold numbers before 2026-12-02's fifth session include that compile."""
    import compileall

    import knowtree

    compileall.compile_dir(str(Path(knowtree.__file__).parent), quiet=1)


def disk(db: Path | str) -> float:
    if isinstance(db, str):  # PostgreSQL
        import psycopg

        with psycopg.connect(db) as conn:
            return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0] / 2**20
    return sum(p.stat().st_size for p in db.parent.rglob(db.name + "*") if p.is_file()) / 2**20


def pg_database(pg_dir: str, name: str) -> str:
    """A fresh database `name` on the PostgreSQL kept in `pg_dir` (started if needed); its URL."""
    import psycopg

    from knowtree.store import pgserver

    url = pgserver.start(Path(pg_dir))
    admin = url.replace("/knowtree?", "/postgres?")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # type: ignore[arg-type]
        conn.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
    return url.replace("/knowtree?", f"/{name}?")


def pg_url(pg_dir: str, name: str) -> str:
    """The URL of the database `name` an earlier run made on the PostgreSQL kept in `pg_dir`."""
    from knowtree.store import pgserver

    return pgserver.start(Path(pg_dir)).replace("/knowtree?", f"/{name}?")


def run(
    leaves: int, files: int, n_questions: int, budget: int, work: Path, pg_dir: str = "", *, reuse: bool = False,
    cold_runs: int = 3, embed_sample: int = 0, build_only: bool = False,
) -> dict[str, Any]:  # fmt: skip
    corpus = work / f"corpus{leaves}"
    db: Path | str
    if pg_dir:
        db = (pg_url if reuse else pg_database)(pg_dir, f"e9_{leaves}")
    else:
        db = work / f"scale{leaves}.db"
        if reuse and not db.is_file():
            raise SystemExit(f"{db}: no database to reuse (run without --reuse first)")
    facts = write_corpus(corpus, leaves, files)
    qs = questions(facts, n_questions)
    backend = "postgresql" if pg_dir else "sqlite"
    out: dict[str, Any] = {"backend": backend, "leaves": leaves, "files": files, "budget": budget}
    if not reuse:
        if isinstance(db, Path):  # a fresh file: a build over an earlier one would reuse its leaves
            for old in (db, *db.parent.glob(db.name + "-*")):
                old.unlink(missing_ok=True)
            shutil.rmtree(db.with_name(db.name + ".vectors"), ignore_errors=True)
        server_before = server_cpu_s(pg_dir) if pg_dir else 0.0
        seconds, measured = build(db, corpus)
        out["build_s"] = round(seconds, 1)
        out["leaves_per_s"] = round(leaves / seconds)
        out.update(measured)
        if pg_dir:
            out["server_cpu_s"] = round(server_cpu_s(pg_dir) - server_before, 1)
        if build_only:
            return out
        out["embed_s"] = round(embed_seconds(db, embed_sample), 1)
        if embed_sample:
            out["embed_sample"] = embed_sample
    out["load_before"] = round(os.getloadavg()[0], 2)
    child = subprocess.run(
        [sys.executable, __file__, "--warm", str(db), "--budget", str(budget)],
        input=json.dumps(qs),
        capture_output=True,
        text=True,
        check=True,
    )
    out.update(json.loads(child.stdout))
    compile_bytecode()
    colds = [cold(db, q) for q, _ in qs[:cold_runs]]
    out["cold_cli_s"] = round(statistics.median(colds), 2)
    out["cold_cli_range_s"] = [round(min(colds), 2), round(max(colds), 2)]
    out["load_after"] = round(os.getloadavg()[0], 2)
    out["disk_mb"] = round(disk(db), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leaves", type=int, nargs="+", default=[10_000])
    ap.add_argument("--files", type=int, default=0, help="files per corpus (default: leaves / 250)")
    ap.add_argument("--questions", type=int, default=120)
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--work", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--pg-dir", default="", help="run on a PostgreSQL whose data lives in DIR")
    ap.add_argument("--reuse", action="store_true", help="questions only, on the database built before")
    ap.add_argument("--cold-runs", type=int, default=3, help="cold CLI questions (median reported)")
    ap.add_argument("--embed-sample", type=int, default=0, help="time embedding on this many texts, scaled (0: all)")
    ap.add_argument("--build-only", action="store_true", help="the build's numbers only: no embedding timed, no questions")
    ap.add_argument("--warm", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.warm:
        target = args.warm if "://" in args.warm else Path(args.warm)
        print(json.dumps(warm(target, [tuple(q) for q in json.load(sys.stdin)], args.budget)))
        return
    work = Path(args.work or tempfile.mkdtemp(prefix="kt-e9-"))
    rows = []
    for n in args.leaves:
        files = args.files or max(1, n // 250)
        row = run(
            n, files, args.questions, args.budget, work, args.pg_dir, reuse=args.reuse, cold_runs=args.cold_runs,
            embed_sample=args.embed_sample, build_only=args.build_only,
        )
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:
        Path(args.out).write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
