"""Zero-call build throughput: leaves/s of `knowtree build DIR --summaries none --model keyword` on
synthetic corpora of growing size, so that super-linear steps show as a falling rate.

The corpus is deterministic (seeded): Markdown files of `--sections` sections each ("## Section k"
and `--per-section` paragraphs of about `--leaf-chars` characters), as many files as `--leaves`
needs; the build's chunk size is `--leaf-chars`, so each paragraph is about one leaf. Each size is
built once through the CLI (a fresh process: imports, store opening and all) and, with `--library`,
once through
`KnowTree.build` with phase timers (`ingest` reading and chunking, `construct` the tree's plan and
nodes, `store` the `save_tree` transaction with its index sync) and, with `--profile N`, the top N
entries of a cProfile of the library build.

    PYTHONPATH=src python benchmarks/bench_build_scale.py --leaves 1000 10000 100000 --library
    PYTHONPATH=src python benchmarks/bench_build_scale.py --leaves 10000 --library --profile 25 --no-cli
    PYTHONPATH=src python benchmarks/bench_build_scale.py --leaves 10000 --db postgresql://…  # PostgreSQL
    PYTHONPATH=src python benchmarks/bench_build_scale.py --leaves 10000 --sections 1 --per-section 1  # one-leaf files

Rates are wall time on whatever else the machine runs; `cpu_s` (this process, or the CLI child;
not a PostgreSQL server's) is the steadier number on a shared machine.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORDS = (
    "the team reviewed schedule agreed revisit budget after next release while support queue stayed "
    "quiet documentation updated new onboarding flow customer reported login error invoice payment "
    "refund server restart deploy rollback ticket escalated resolved pending owner priority"
).split()
PEOPLE = "alice bob carol dmitri erin farah gustav hana ivan jun".split()
PROJECTS = "atlas beacon cobalt delta ember falcon garnet harbor".split()


def paragraph(rng: random.Random, chars: int) -> str:
    """One ticket-line-like paragraph of about `chars` characters (at most `chars`)."""
    words = [
        rng.choice(PEOPLE).title(),
        rng.choice(["closed", "reported", "approved", "moved"]),
        rng.choice(PROJECTS),
        str(rng.randint(10, 99999)),
    ]
    while True:
        w = rng.choice(WORDS)
        if len(" ".join(words)) + len(w) + 2 > chars:
            break
        words.append(w)
    return " ".join(words) + "."


def write_corpus(
    directory: Path, *, files: int, sections: int, leaf_chars: int, per_section: int = 2, seed: int = 7
) -> int:
    """Write the corpus; returns the number of paragraphs (about the number of leaves)."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        lines = [f"# File {f}", ""]
        for s in range(sections):
            lines += [f"## Section {s}", ""]
            for _ in range(per_section):
                lines += [paragraph(rng, leaf_chars - 30), ""]
        sub = directory / f"d{f // 1000:04d}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{f:06d}.md").write_text("\n".join(lines), encoding="utf-8")
    return files * sections * per_section


def cli_build(corpus: Path, db: str, tree: str, leaf_chars: int) -> tuple[float, float, dict[str, Any]]:
    """Wall and CPU seconds of a `knowtree build` process, and its JSON report."""
    cmd = [
        sys.executable,
        "-c",
        "from knowtree.cli.app import main; main()",
        "build",
        str(corpus),
        "--tree",
        tree,
        "--summaries",
        "none",
        "--model",
        "keyword",
        "--db",
        str(db),
        "--chunk-size",
        str(leaf_chars),
        "--json",
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode != 0:
        raise SystemExit(f"build failed ({done.returncode}): {done.stderr[-2000:]}")
    try:
        report = json.loads(done.stdout)
    except ValueError:
        report = {"stdout": done.stdout[-500:]}
    return seconds, cpu, report


def fresh_target(work: Path, url: str | None, name: str) -> str:
    """A database file of its own under `work`, or the tree `name` deleted from the database `url`."""
    if url is None:
        db = work / f"{name}.db"
        for leftover in work.glob(f"{name}.db*"):
            leftover.unlink()
        return str(db)
    from knowtree.core import KnowTree

    with KnowTree(url, model="keyword", read_env=False) as kt:
        if kt.store.tree_exists(name):
            kt.delete(name)
    return url


def library_build(corpus: Path, db: str, tree: str, leaf_chars: int, profile: int) -> dict[str, Any]:
    """`KnowTree.build` with phase timers around the steps of `knowtree.building`."""
    from knowtree import building
    from knowtree.core import KnowTree

    try:
        from knowtree.store.sqlbase import SQLStoreBase as Store  # SQLite and PostgreSQL
    except ImportError:  # code before the PostgreSQL store
        from knowtree.store.sqlite import SQLiteStore as Store
    from knowtree.testing.models import KeywordModel

    phases: dict[str, float] = {}

    def timer(name: str, fn: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - started

        return wrapped

    patches = [
        (building, "load_documents", "ingest"),
        (building, "build_tree", "construct"),
        (Store, "save_tree", "store"),
    ]
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in patches]
    for obj, attr, name in patches:
        setattr(obj, attr, timer(name, getattr(obj, attr)))
    prof = cProfile.Profile() if profile else None
    try:
        started, cpu = time.perf_counter(), time.process_time()
        with KnowTree(db, model=KeywordModel(), summaries="none", chunk_size=leaf_chars) as kt:
            if prof:
                prof.enable()
            report = kt.build([str(corpus)], tree=tree)
            if prof:
                prof.disable()
        total, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        for obj, attr, fn in saved:
            setattr(obj, attr, fn)
    out: dict[str, Any] = {
        "seconds": round(total, 2),
        "leaves": report.leaves,
        "nodes": report.nodes,
        "leaves_per_s": round(report.leaves / total, 1),
        "cpu_s": round(cpu, 2),  # all threads: what the build costs on an idle machine
        "leaves_per_cpu_s": round(report.leaves / cpu, 1),
        "phases_s": {k: round(v, 2) for k, v in phases.items()},
    }
    if prof:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(profile)
        out["profile_cumulative"] = buf.getvalue()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(profile)
        out["profile_tottime"] = buf.getvalue()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leaves", type=int, nargs="+", default=[1000, 10000], help="corpus sizes, in leaves")
    ap.add_argument("--sections", type=int, default=5, help="sections per file")
    ap.add_argument(
        "--per-section",
        type=int,
        default=2,
        help="paragraphs per section (--sections 1 --per-section 1: one-leaf files)",
    )
    ap.add_argument("--leaf-chars", type=int, default=300, help="characters per leaf (the chunk size)")
    ap.add_argument(
        "--library", action="store_true", help="also build through KnowTree.build with phase timers"
    )
    ap.add_argument("--no-cli", action="store_true", help="skip the CLI build")
    ap.add_argument(
        "--profile", type=int, default=0, help="print the top N cProfile entries of the library build"
    )
    ap.add_argument("--workdir", type=Path, help="keep corpora and databases here (default: a temporary dir)")
    ap.add_argument("--db", help="a postgresql:// URL to build in (default: an SQLite file per build)")
    ap.add_argument("--out", type=Path, help="write the results as JSON")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kt-buildscale-") as tmp:
        work = args.workdir or Path(tmp)
        for leaves in args.leaves:
            files = max(1, leaves // (args.per_section * args.sections))
            corpus = work / f"corpus-{leaves}-{args.sections}x{args.per_section}-{args.leaf_chars}"
            if not corpus.exists():
                write_corpus(
                    corpus,
                    files=files,
                    sections=args.sections,
                    leaf_chars=args.leaf_chars,
                    per_section=args.per_section,
                )
            row: dict[str, Any] = {"target_leaves": leaves, "files": files}
            if not args.no_cli:
                db = fresh_target(work, args.db, f"cli{leaves}")
                seconds, cpu, report = cli_build(corpus, db, f"cli{leaves}", args.leaf_chars)
                got = int(report.get("leaves", leaves))
                row["cli"] = {
                    "seconds": round(seconds, 2),
                    "leaves": got,
                    "leaves_per_s": round(got / seconds, 1),
                    "cpu_s": round(cpu, 2),
                    "leaves_per_cpu_s": round(got / cpu, 1),
                    "db_mb": None if args.db else round(os.path.getsize(db) / 1e6, 1),
                }
                print(
                    f"cli      {leaves:>8} leaves: {seconds:8.2f} s  {got / seconds:8.1f} leaves/s"
                    f"  cpu {cpu:8.2f} s  {got / cpu:8.1f} leaves/cpu-s",
                    flush=True,
                )
            if args.library:
                db = fresh_target(work, args.db, f"lib{leaves}")
                lib = library_build(corpus, db, f"lib{leaves}", args.leaf_chars, args.profile)
                for key in ("profile_cumulative", "profile_tottime"):
                    text = lib.pop(key, None)
                    if text:
                        print(text, flush=True)
                row["library"] = lib
                print(
                    f"library  {leaves:>8} leaves: {lib['seconds']:8.2f} s  {lib['leaves_per_s']:8.1f} leaves/s"
                    f"  cpu {lib['cpu_s']:8.2f} s  {lib['leaves_per_cpu_s']:8.1f} leaves/cpu-s"
                    f"  phases {lib['phases_s']}",
                    flush=True,
                )
            rows.append(row)
    result = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "backend": "postgresql" if args.db else "sqlite",
        "leaf_chars": args.leaf_chars,
        "sections": args.sections,
        "per_section": args.per_section,
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
