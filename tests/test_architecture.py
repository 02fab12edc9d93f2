"""The house rules that keep every change in one obvious place, checked on the source itself.

The layer contracts live in pyproject.toml (`lint-imports`, run by .ci/run); these tests add what
import-linter does not check: no import cycle anywhere (deferred imports included), modules of a
readable size, no private name reached across modules, every table created by the migrations,
and `import knowtree` loading neither the test fakes nor the evaluation package.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(SRC.rglob("*.py")):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(name: str, path: Path) -> list[tuple[str, str | None]]:
    """(module, imported name or None) for every import in the file, deferred ones included."""
    out: list[tuple[str, str | None]] = []
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out += [(module, a.name) for a in node.names]
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for module, name in _imports(m, path):
            target = f"{module}.{name}" if name and f"{module}.{name}" in mods else module
            if target in mods and target != m:
                graph[m].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    # a package's __init__ importing its own submodules is how packages re-export, not a cycle
    return [c for c in found if not all(x == c[0] or x.startswith(c[0] + ".") for x in c)]


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "b": {"a.x"}}) == [["a.x", "a.y", "a.z"]]
    assert _cycles({"p": {"p.q"}, "p.q": {"p"}}) == []


def test_modules_are_small() -> None:
    big = {
        str(p.relative_to(ROOT)): n
        for p in _modules().values()
        if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_LINES
    }
    assert big == {}


@pytest.mark.parametrize("tree", ["src", "benchmarks"])
def test_no_private_names_across_modules(tree: str) -> None:
    mods = _modules()
    reached = []
    for path in sorted((ROOT / tree).rglob("*.py")):
        name = ".".join(path.relative_to(ROOT / tree).with_suffix("").parts).removesuffix(".__init__")
        for module, imported in _imports(name, path):
            private = imported and imported.startswith("_") and not imported.startswith("__")
            if private and module in mods and module != name:
                reached.append(f"{path.relative_to(ROOT)}: {module}.{imported}")
    assert reached == []


def test_every_table_is_created_by_the_migrations() -> None:
    """By the one history: SQLite's steps (migrations.py), PostgreSQL's baseline (migrations_pg.py) and
    the scripts of later steps kept beside them (migrations_*.py). fts_terms.py makes only temporary
    and in-memory tokenizer tables (no schema of the database); flat_tables.py the tables of a named
    flat index, which may live in a file of its own or in memory, where no migration runs."""
    ddl = re.compile(r"CREATE\s+(VIRTUAL\s+)?TABLE\s+(IF\s+NOT\s+EXISTS\s+)?[\w\"{]", re.IGNORECASE)
    allowed = {"migrations.py", "fts_terms.py", "flat_tables.py"}
    outside = [
        str(p.relative_to(ROOT))
        for p in _modules().values()
        if p.name not in allowed
        and not p.name.startswith("migrations_")
        and ddl.search(p.read_text(encoding="utf-8"))
    ]
    assert outside == []


def test_import_knowtree_loads_no_fakes_and_no_evaluation() -> None:
    code = "import sys, knowtree; print(sorted(m for m in sys.modules if m.startswith(('knowtree.testing', 'knowtree_eval', 'knowtree.cli'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
