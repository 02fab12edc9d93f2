"""Tenancy that cannot collide with internal names, and builds that cannot read outside their roots.

1. A tenant named like an internal label (`kb`: knowledge-base runs are labelled `kb:NAME`) sees
   nothing of another tenant, nor of the local owner, through any listing: trees, memories, KBs,
   jobs, the ledger (with and without `?tree=`), the MCP tools, the web page. Runs carry their owner
   in a column of their own (a migration fills it for existing rows).
2. A symbolic link (or a hard link) inside a tenant's root never brings another tenant's file into a
   build: tree builds of a folder, of `ROOT/.`, knowledge-base document folders; each refused file
   is named in the job's error and nothing is stored.
3. A folder or pattern that matches nothing names every kind of file a build reads.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

from fastapi.testclient import TestClient
from typer.testing import CliRunner

import knowtree
from knowtree.errors import InputError
from knowtree.ingest.formats import ALL_SUFFIXES, FORMATS
from knowtree.ingest.roots import ReadRoots
from knowtree.server.tenancy import KeyStore, Principal
from knowtree.store import open_store
from knowtree.store.inmemory import InMemoryStore
from knowtree.store.migrations import MIGRATIONS, migrate
from knowtree.store.names import owner_of
from knowtree.testing.models import KeywordModel
from server_helpers import CHAT, make_app, wait_job
from test_kb import write_inputs

SECRET = "ACMESECRET7731"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}
INTERNAL_LOOKING = ("kb", "tree", "kb-ask", "kb-build")


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _mcp(c: TestClient, key: str, tool: str, args: dict[str, Any]) -> str:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}
    return c.post("/mcp", headers={**MCP_HEADERS, **_auth(key)}, json=body).text


def _kb_build(c: TestClient, name: str, files: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    r = c.post(f"/v1/kbs/{name}/build", headers=headers, json={**files, "embedder": "hash"})
    assert r.status_code == 202, r.text
    return wait_job(c, r.json()["id"], headers)


# -- 1. names ---------------------------------------------------------------------------------
@pytest.fixture
def acme_world(tmp_path: Path):
    """Tenant acme (a tree, a memory, a KB asked a question holding the secret) and the local
    owner's KB `x` (its runs are labelled `kb:x`, as a tenant `kb`'s tree `x` would be stored)."""
    app = make_app(tmp_path, rate_per_second=1000, rate_burst=1000)
    kt = app.state.service.kt
    kb_dir = tmp_path / "acme-kb"
    kb_dir.mkdir()
    files = write_inputs(kb_dir)
    kt.kb("x", embedder="hash").build(**files)  # the local owner's KB, built before any key exists
    kt.kb("x", embedder="hash").ask(f"local owner's question {SECRET} about pairing")
    with TestClient(app, base_url="http://127.0.0.1:8080") as c:
        keys = KeyStore(kt.store)
        acme_key = keys.create("acme")[0]
        acme = _auth(acme_key)
        others = {t: keys.create(t)[0] for t in INTERNAL_LOOKING}
        app.state.auth._open_checked = 0.0
        docs = tmp_path / "acme-docs"
        docs.mkdir()
        (docs / "secret.md").write_text(f"# Secret\n\nThe launch code for ORCHID is {SECRET}.\n")
        r = c.post("/v1/trees/docs/build", headers=acme, json={"paths": [str(docs)]})
        assert wait_job(c, r.json()["id"], acme)["state"] == "done"
        r = c.post("/v1/memories/diary/messages", headers=acme,
                   json={"messages": [*CHAT, {"role": "user", "content": f"my pin is {SECRET}"}]})
        assert r.status_code == 200, r.text
        assert _kb_build(c, "hp", {**files, "docs": [files["docs"]]}, acme)["state"] == "done"
        r = c.post("/v1/kbs/hp/ask", headers=acme, json={"query": f"my {SECRET} headphones won't pair"})
        assert r.status_code == 200, r.text
        yield {"c": c, "acme": acme, "acme_key": acme_key, "others": others}


def _everything_listed(c: TestClient, key: str) -> dict[str, str]:
    h = _auth(key)
    seen = {url: c.get(url, headers=h).text for url in (
        "/v1/trees", "/v1/kbs", "/v1/jobs", "/v1/ledger?limit=500", "/v1/ledger?tree=x&limit=500",
        "/v1/ledger?tree=hp&limit=500", "/v1/ledger?tree=docs&limit=500", "/v1/ledger?tree=diary&limit=500",
        "/ui",
    )}
    seen["mcp list_trees"] = _mcp(c, key, "list_trees", {})
    seen["mcp kb_ask (lists the caller's KBs)"] = _mcp(c, key, "kb_ask", {"kb": "nope", "query": "pair"})
    return seen


@pytest.mark.parametrize("tenant", INTERNAL_LOOKING)
def test_a_tenant_named_like_an_internal_label_sees_nothing_of_others(acme_world: dict[str, Any], tenant: str) -> None:
    c = acme_world["c"]
    for where, text in _everything_listed(c, acme_world["others"][tenant]).items():
        assert SECRET not in text and "acme" not in text, (tenant, where, text[:300])
    ledger = c.get("/v1/ledger?limit=500", headers=_auth(acme_world["others"][tenant])).json()
    assert ledger == []  # it ran nothing: it owns no run


def test_a_tenant_sees_its_own_runs_knowledge_base_runs_included(acme_world: dict[str, Any]) -> None:
    c, acme = acme_world["c"], acme_world["acme"]
    runs = c.get("/v1/ledger?limit=500", headers=acme).json()
    shown = {(r["kind"], r["tree"]) for r in runs}
    assert {("build", "docs"), ("add", "diary"), ("kb-build", "kb:hp"), ("kb-ask", "kb:hp")} <= shown
    assert not any("acme:" in str(r["tree"]) for r in runs)  # its own names, not the stored ones
    assert not any(r["tree"] == "kb:x" for r in runs)  # the local owner's KB is not acme's
    only_docs = c.get("/v1/ledger?tree=docs", headers=acme).json()
    assert only_docs and {r["tree"] for r in only_docs} == {"docs"}
    # the routes the other tenants were checked through do show acme its own things
    seen = _everything_listed(c, acme_world["acme_key"])
    assert SECRET in seen["/v1/ledger?limit=500"] and '"tree":"diary"' in seen["/v1/ledger?tree=diary&limit=500"]
    assert '"docs"' in seen["/v1/trees"] and '"hp"' in seen["/v1/kbs"] and '"docs"' in seen["/v1/jobs"]
    assert "docs" in seen["mcp list_trees"] and "hp" in seen["mcp kb_ask (lists the caller's KBs)"]
    assert "docs" in seen["/ui"] and "diary" in seen["/ui"]


def test_the_local_owner_still_sees_every_run_under_its_label(tmp_path: Path) -> None:
    kt = knowtree.open(tmp_path / "kb.db", model=KeywordModel())
    files = write_inputs(tmp_path)
    kt.kb("acme:hp", embedder="hash").build(**files)
    labels = {r["tree"] for r in kt.store.runs(limit=50)}
    assert "kb:acme:hp" in labels  # `knowtree ledger` shows what it always showed
    assert kt.store.runs("kb:acme:hp")[0]["kind"] == "kb-build"
    assert [r["tree"] for r in kt.store.runs(owner="acme")] == ["kb:acme:hp"]
    assert kt.store.runs(owner="kb") == []


@pytest.mark.parametrize("store_kind", ["sqlite", "memory"])
def test_runs_are_selected_by_owner_exactly(tmp_path: Path, store_kind: str) -> None:
    store = open_store(str(tmp_path / "s.db")) if store_kind == "sqlite" else InMemoryStore()
    store.start_run("kb-ask", "acme:hp", "q", space="kb")
    store.start_run("build", "kb:notes")  # tenant kb's tree `notes`
    store.start_run("ask", "acme:docs")
    store.start_run("ask", "kb:acme:x")  # a local name with two colons: nobody's
    assert sorted(str(r["tree"]) for r in store.runs(owner="acme")) == ["acme:docs", "kb:acme:hp"]
    assert [r["tree"] for r in store.runs(owner="kb")] == ["kb:notes"]
    assert [r["subject"] for r in store.runs("kb:acme:hp")] == ["acme:hp"]
    assert [r["space"] for r in store.runs("kb:acme:hp")] == ["kb"]


def test_owners_are_read_from_whole_names() -> None:
    assert owner_of("acme:docs") == "acme"
    for name in ("kb:acme:hp", "acme", ":x", "acme:", "Acme:x", "a b:x", "x" * 33 + ":y", None, ""):
        assert owner_of(name) is None, name
    kb = Principal(tenant="kb")
    assert kb.shown("kb:acme:hp") is None and kb.shown("kb:notes") == "notes"


def test_the_migration_gives_existing_runs_their_owner(tmp_path: Path) -> None:
    mine = next(i for i, m in enumerate(MIGRATIONS) if "runs ADD COLUMN owner" in m)
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    for number, script in enumerate(MIGRATIONS[:mine], start=1):  # the schema before this branch
        conn.executescript(script)
        conn.execute(f"PRAGMA user_version = {number}")
    labels = {
        "r1": ("kb-ask", "kb:acme:hp"), "r2": ("build", "acme:docs"), "r3": ("kb-build", "kb:x"),
        "r4": ("ask", "notes"), "r5": ("build", "kb:notes"), "r6": ("ask", "kb:acme:x"), "r7": ("judge", None),
        "r8": ("ask", "x" * 33 + ":y"), "r9": ("ask", "Acme:docs"), "r10": ("ask", "a_b-9:c:"),
    }
    for rid, (kind, tree) in labels.items():
        conn.execute("INSERT INTO runs(id, kind, tree, status, started) VALUES (?, ?, ?, 'ok', '2024')", (rid, kind, tree))
    migrate(conn)
    rows = {r[0]: r[1:] for r in conn.execute("SELECT id, tree, space, subject, owner FROM runs")}
    assert rows["r1"] == ("kb:acme:hp", "kb", "acme:hp", "acme")
    assert rows["r2"] == ("acme:docs", "tree", "acme:docs", "acme")
    assert rows["r3"] == ("kb:x", "kb", "x", None)  # the local owner's KB x
    assert rows["r5"] == ("kb:notes", "tree", "kb:notes", "kb")  # tenant kb's tree notes
    for rid, (_label, _space, subject, owner) in rows.items():
        assert owner == owner_of(subject), (rid, subject, owner)  # the SQL reads names as owner_of does
    assert rows["r7"][2:] == (None, None)


# -- 2. links ---------------------------------------------------------------------------------
@pytest.fixture
def linked(tmp_path: Path):
    """Tenants acme and evil with roots of their own; evil's folder `links` holds a symbolic link to
    acme's secret, one to a file outside every root, and one (harmless) to its own file."""
    acme, evil, outside = tmp_path / "acme", tmp_path / "evil", tmp_path / "outside"
    for d in (acme / "docs", evil / "links", evil / "kbdocs", outside):
        d.mkdir(parents=True)
    (acme / "docs/secret.md").write_text(f"# Secret\n\nThe launch code for ORCHID is {SECRET}.\n")
    (outside / "passwd.txt").write_text(f"root:x:0:0:{SECRET}-outside:/root:/bin/bash\n")
    (evil / "own.md").write_text("# Own\n\nEvil's own note about the harbour.\n")
    (evil / "links/leak.md").symlink_to(acme / "docs/secret.md")
    (evil / "links/passwd.txt").symlink_to(outside / "passwd.txt")
    (evil / "links/mine.md").symlink_to(evil / "own.md")  # inside its own root: fine
    (evil / "kbdocs/leak.md").symlink_to(acme / "docs/secret.md")
    app = make_app(tmp_path, allowed_roots=[], rate_per_second=1000, rate_burst=1000,
                   tenant_roots={"acme": [acme], "evil": [evil]})
    with TestClient(app, base_url="http://127.0.0.1:8080") as c:
        keys = KeyStore(app.state.service.kt.store)
        headers = {t: _auth(keys.create(t)[0]) for t in ("acme", "evil")}
        app.state.auth._open_checked = 0.0
        yield {"c": c, "h": headers["evil"], "acme": acme, "evil": evil, "kt": app.state.service.kt}


def _nothing_leaked(c: TestClient, h: dict[str, str], tree: str) -> None:
    r = c.get(f"/v1/trees/{tree}", headers=h)
    assert r.status_code == 404 or SECRET not in r.text, r.text
    if r.status_code == 200:
        got = c.post(f"/v1/trees/{tree}/retrieve", headers=h, json={"question": "launch code ORCHID", "budget_tokens": 4000})
        assert SECRET not in got.text


@pytest.mark.parametrize("entry", ["links", "."])
def test_a_link_inside_a_tenant_root_does_not_lead_a_folder_build_out(linked: dict[str, Any], entry: str) -> None:
    c, h = linked["c"], linked["h"]
    r = c.post("/v1/trees/linkdir/build", headers=h, json={"paths": [str(linked["evil"] / entry)]})
    assert r.status_code == 202, r.text
    job = wait_job(c, r.json()["id"], h)
    assert job["state"] == "failed", job
    error = job["error"]
    assert "leak.md" in error and "passwd.txt" in error and "outside the folders" in error, error
    assert "mine.md" not in error  # a link that stays inside the root is fine
    assert SECRET not in error
    _nothing_leaked(c, h, "linkdir")
    assert c.get("/v1/trees/linkdir", headers=h).status_code == 404  # nothing stored


def test_naming_a_link_or_dotdot_out_of_the_root_is_refused(linked: dict[str, Any]) -> None:
    c, h, evil = linked["c"], linked["h"], linked["evil"]
    for raw in (evil / "links/leak.md", evil / "links/passwd.txt", f"{evil}/links/../../acme/docs/secret.md"):
        r = c.post("/v1/trees/t/build", headers=h, json={"paths": [str(raw)]})
        assert r.status_code == 403, (raw, r.text)
    ok = c.post("/v1/trees/mine/build", headers=h, json={"paths": [str(evil / "links/mine.md")]})
    assert wait_job(c, ok.json()["id"], h)["state"] == "done"


def test_a_knowledge_base_docs_folder_does_not_follow_a_link_out(linked: dict[str, Any]) -> None:
    c, h, evil = linked["c"], linked["h"], linked["evil"]
    files = write_inputs(evil)
    (evil / "kbdocs/manual.md").write_text("# Manual\n\n## Pairing\n\nHold power 7 s to pair.\n")
    job = _kb_build(c, "leaky", {**files, "docs": [str(evil / "kbdocs")]}, h)
    assert job["state"] == "failed" and "leak.md" in job["error"] and "outside the folders" in job["error"], job
    assert c.get("/v1/kbs/leaky", headers=h).status_code == 404
    (evil / "kbdocs/leak.md").unlink()  # without the link the same build works
    assert _kb_build(c, "clean", {**files, "docs": [str(evil / "kbdocs")]}, h)["state"] == "done"


def test_a_library_build_within_roots_checks_each_file_it_reads(linked: dict[str, Any]) -> None:
    """`KnowTree.build(within=...)` (what the server's jobs call) refuses the files of a folder that
    lead out, as it reads them; the same build without the links works."""
    kt, evil = linked["kt"], linked["evil"]
    with pytest.raises(InputError, match=r"leak\.md") as caught:
        kt.build([str(evil / "links")], tree="direct", within=ReadRoots.of([evil]))
    assert "passwd.txt" in str(caught.value) and not kt.store.tree_exists("direct")
    for name in ("leak.md", "passwd.txt"):
        (evil / "links" / name).unlink()
    report = kt.build([str(evil / "links")], tree="direct", within=ReadRoots.of([evil]))
    assert report.documents == 1


@pytest.mark.skipif(not hasattr(os, "link"), reason="no hard links here")
def test_a_hard_link_in_a_tenant_root_is_refused(linked: dict[str, Any]) -> None:
    c, h, evil = linked["c"], linked["h"], linked["evil"]
    hard = evil / "hard"
    hard.mkdir()
    os.link(linked["acme"] / "docs/secret.md", hard / "copy.md")
    (hard / "own.md").write_text("# Own\n\nMine.\n")
    r = c.post("/v1/trees/hard/build", headers=h, json={"paths": [str(hard)]})
    job = wait_job(c, r.json()["id"], h)
    assert job["state"] == "failed" and "copy.md" in job["error"] and "hard links" in job["error"], job
    _nothing_leaked(c, h, "hard")
    r = c.post("/v1/trees/hard/build", headers=h, json={"paths": [str(hard / "copy.md")]})
    assert r.status_code == 403 and "hard links" in r.json()["detail"], r.text


def test_the_local_cli_still_follows_links(linked: dict[str, Any], tmp_path: Path) -> None:
    """The local owner can read those files anyway: the CLI (no roots) reads through links."""
    kt = knowtree.open(tmp_path / "local.db", model=KeywordModel())
    kt.build([str(linked["evil"] / "links")], tree="local")
    assert any(SECRET in d.text for d in kt.store.documents("local"))


def test_read_roots_policy() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root, other = Path(tmp, "root"), Path(tmp, "other")
        (root / "sub").mkdir(parents=True)
        other.mkdir()
        (root / "a.md").write_text("a")
        (other / "b.md").write_text("b")
        (root / "in.md").symlink_to(root / "a.md")
        (root / "out.md").symlink_to(other / "b.md")
        (root / "dirlink").symlink_to(other, target_is_directory=True)
        roots = ReadRoots.of([root])
        for fine in (root / "a.md", root / "in.md", root / "sub/../a.md", root / "missing.md"):
            roots.check(fine)
        for bad in (root / "out.md", root / "dirlink/b.md", root / "sub/../../other/b.md", other / "b.md"):
            with pytest.raises(InputError, match="outside the folders"):
                roots.check(bad)
        os.link(root / "a.md", root / "twice.md")
        roots.check(root / "twice.md")  # hard links are the tenants' concern only
        with pytest.raises(InputError, match="2 hard links"):
            ReadRoots.of([root], single_link=True).check(root / "twice.md")


# -- 3. what a build reads -----------------------------------------------------------------------
def test_a_pattern_or_folder_matching_nothing_names_every_supported_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from knowtree.cli.app import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    cli = CliRunner()
    for entry in ("zz*.pdf", "empty"):
        out = cli.invoke(app, ["build", entry, "--tree", "t", "--db", "kb.db", "--model", "keyword"])
        assert out.exit_code != 0
        text = out.stdout + out.stderr
        assert ".txt/.md files" not in text, text
        for kind in FORMATS:
            assert kind in text, (entry, kind, text)
        for suffix in ALL_SUFFIXES:
            assert suffix in text, (entry, suffix, text)
