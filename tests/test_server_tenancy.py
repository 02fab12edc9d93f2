"""Adversarial tenancy: tenant B (and A's revoked / read-only keys) tries every endpoint and every MCP
tool against tenant A's trees, nodes, memories and jobs. Nothing of A may be read or changed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

from fastapi.testclient import TestClient

from knowtree.server.tenancy import KeyStore
from server_helpers import CHAT, build, make_app, wait_job
from test_kb import write_inputs

SECRET = "zebrapassword42"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}


def _mcp(c: TestClient, key: str | None, tool: str, args: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    headers = dict(MCP_HEADERS)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}
    r = c.post("/mcp", headers=headers, json=body)
    return r.status_code, (r.json() if r.headers.get("content-type", "").startswith("application") else {})


def _fill(path: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


@pytest.fixture
def world(tmp_path: Path):
    app = make_app(tmp_path, rate_per_second=1000, rate_burst=1000)
    with TestClient(app, base_url="http://127.0.0.1:8080") as c:
        keys = KeyStore(app.state.service.kt.store)
        a, _ = keys.create("alpha")
        b, _ = keys.create("beta")
        a_ro, _ = keys.create("alpha", read_only=True)
        a_old, old_info = keys.create("alpha")
        keys.revoke(old_info.id)
        app.state.auth._open_checked = 0.0
        ha, hb = {"Authorization": f"Bearer {a}"}, {"Authorization": f"Bearer {b}"}
        docs = tmp_path / "alpha-docs"
        docs.mkdir()
        (docs / "vault.md").write_text(f"# Vault\n\nThe vault code is {SECRET} and Dora keeps it.\n")
        (docs / "other.md").write_text("# Other\n\nNothing to see in the garden shed.\n")
        build(c, "asecret", [str(docs)], ha)
        r = c.post("/v1/memories/diary/messages", json={"messages": [*CHAT, {"role": "user", "content": f"my pin is {SECRET}"}]}, headers=ha)
        assert r.status_code == 200, r.text
        kb_dir = tmp_path / "alpha-kb"
        kb_dir.mkdir()
        kb_files = write_inputs(kb_dir)
        with open(kb_files["docs"], "a") as f:
            f.write(json.dumps({"id": "vault", "title": "Vault", "text": f"The battery vault code is {SECRET}; Dora keeps it."}) + "\n")
        r = c.post("/v1/kbs/akb/build", headers=ha, json={"issues": kb_files["issues"], "docs": [kb_files["docs"]],
                                                           "attributes": kb_files["attributes"], "rules": kb_files["rules"],
                                                           "embedder": "hash", "solutions": "eager"})
        assert r.status_code == 202 and wait_job(c, r.json()["id"], ha)["state"] == "done"
        job_a = c.get("/v1/jobs", headers=ha).json()[0]["id"]
        yield {"c": c, "keys": {"a": a, "b": b, "a_ro": a_ro, "a_old": a_old}, "ha": ha, "hb": hb, "job_a": job_a,
               "docs": docs}


def _snapshot(c: TestClient, ha: dict[str, str]) -> str:
    outline = c.get("/v1/trees/asecret", headers=ha).json()
    outline["tree"].pop("updated", None)
    return json.dumps([outline, c.get("/v1/memories/diary/messages", headers=ha).json(),
                       c.get("/v1/trees", headers=ha).json(), c.get("/v1/kbs", headers=ha).json(),
                       c.get("/v1/kbs/akb", headers=ha).json(), c.get("/v1/kbs/akb/export", headers=ha).text],
                      sort_keys=True)


def test_no_cross_tenant_read_or_write(world: dict[str, Any]) -> None:
    c, ha, hb = world["c"], world["ha"], world["hb"]
    before = _snapshot(c, ha)
    a_nodes = [n["id"] for n in [c.get("/v1/trees/asecret", headers=ha).json()["root"]]]
    a_nodes += [ch["id"] for ch in c.get("/v1/trees/asecret", headers=ha).json()["root"]["children"]]
    # B owns a tree of its own, so B's routes that exist are exercised with A's node ids too
    b_file = str(world["docs"].parent / "b.md")
    Path(b_file).write_text("# Beta\n\nBeta's own notes about the harbour.\n")
    build(c, "mine", [b_file], hb)
    (world["docs"].parent / "beta-kb").mkdir()
    b_kb = write_inputs(world["docs"].parent / "beta-kb")  # B's own inputs: B's KB writes go to B's namespace

    attempts = 0
    leaks: list[str] = []
    tools = {
        "list_trees": {}, "view_node": {"tree": "asecret"}, "ask": {"tree": "asecret", "question": "vault code?"},
        "recall": {"tree": "diary", "query": "pin"}, "get_node_messages": {"memory": "diary", "node_id": a_nodes[0]},
        "job_status": {"job_id": world["job_a"]}, "build": {"tree": "asecret", "paths": [b_file]},
        "forget_message": {"memory": "diary", "position": 5}, "kb_ask": {"kb": "akb", "query": "battery vault code"},
        "remember": {"memory": "diary", "messages": [{"role": "user", "content": "B was here"}]},
    }
    for tool, args in tools.items():
        _status, out = _mcp(c, world["keys"]["b"], tool, args)
        attempts += 1
        text = json.dumps(out)
        if SECRET in text or "Dora" in text or "Lisbon" in text:
            leaks.append(f"mcp {tool}")
        if tool not in ("list_trees", "remember", "build"):
            assert out["result"]["isError"], (tool, out)
    schema = c.get("/openapi.json").json()
    for path, methods in schema["paths"].items():
        for method in methods:
            for tree in ("asecret", "diary", "alpha:asecret", "mine", "akb", "alpha:akb"):
                for node in a_nodes:
                    url = _fill(path, {"tree": tree, "memory": tree, "kb": tree, "node_id": node,
                                       "job_id": world["job_a"], "position": "5"})
                    body: dict[str, Any] = {"question": "What is the vault code and who keeps it?", "budget_tokens": 2000}
                    if path.startswith("/v1/kbs/") and path.endswith("/build"):
                        body = {"issues": b_kb["issues"], "docs": [b_kb["docs"]], "attributes": b_kb["attributes"],
                                "rules": b_kb["rules"], "embedder": "hash", "replace": True}
                    elif path.startswith("/v1/kbs/") and path.endswith("/add"):
                        body = {"issues": b_kb["issues"]}
                    elif path.startswith("/v1/kbs/") and path.endswith("/ask"):
                        body = {"query": "battery vault code", "metadata": "keywords"}
                    elif path.endswith("/build"):
                        body = {"paths": [b_file]}  # B's own file: B's writes go to B's namespace
                    elif "messages" in path or path == "/v1/memories":
                        body = {"name": tree, "messages": [{"role": "user", "content": "B was here"}]}
                    kwargs: dict[str, Any] = {"headers": hb}
                    if method in ("post", "put") and not path.endswith("/upload"):
                        kwargs["json"] = body
                    if path.endswith("/upload"):
                        kwargs["files"] = [("files", ("x.md", b"# B\n\nbeta text\n", "text/markdown"))]
                    if method == "get" and path.endswith("/search"):
                        kwargs["params"] = {"q": SECRET}
                    if path.endswith("/documents"):
                        kwargs["params"] = {"path": "vault.md"}
                    r = c.request(method.upper(), url, **kwargs)
                    attempts += 1
                    assert r.status_code < 500, (method, url, r.text)
                    if SECRET in r.text or "Dora" in r.text or "Lisbon" in r.text:
                        leaks.append(f"{method.upper()} {url} -> {r.status_code}")
    assert attempts > 100
    assert leaks == []
    assert _snapshot(c, ha) == before  # A's trees, memory and list unchanged
    assert [t["name"] for t in c.get("/v1/trees", headers=ha).json()] == ["asecret", "diary"]
    assert [k["name"] for k in c.get("/v1/kbs", headers=ha).json()] == ["akb"]
    assert [m["position"] for m in c.get("/v1/memories/diary/messages", headers=ha).json()["messages"]] == [1, 2, 3, 4, 5]
    assert any("/v1/kbs/{kb}" in path for path in schema["paths"]) and any("{position}" in path for path in schema["paths"])
    b_trees = {t["name"] for t in c.get("/v1/trees", headers=hb).json()}
    assert "asecret" in b_trees or "diary" in b_trees  # B's writes landed in B's own namespace
    assert c.get(f"/v1/jobs/{world['job_a']}", headers=hb).status_code == 404
    assert world["job_a"] not in {j["id"] for j in c.get("/v1/jobs", headers=hb).json()}


def test_read_only_revoked_and_missing_keys(world: dict[str, Any]) -> None:
    c = world["c"]
    ro = {"Authorization": f"Bearer {world['keys']['a_ro']}"}
    old = {"Authorization": f"Bearer {world['keys']['a_old']}"}
    assert c.get("/v1/trees/asecret", headers=ro).status_code == 200
    assert c.post("/v1/trees/asecret/ask", headers=ro, json={"question": "vault code?"}).status_code == 200
    writes = [
        ("DELETE", "/v1/trees/asecret", {}),
        ("DELETE", "/v1/trees/asecret/documents", {"params": {"path": "vault.md"}}),
        ("POST", "/v1/trees/asecret/build", {"json": {"paths": [str(world["docs"])]}}),
        ("POST", "/v1/trees/new/upload", {"files": [("files", ("x.md", b"# x\n\ny\n", "text/markdown"))]}),
        ("POST", "/v1/memories/diary/messages", {"json": {"messages": [{"role": "user", "content": "x"}]}}),
        ("POST", "/v1/memories", {"json": {"name": "m2", "messages": [{"role": "user", "content": "x"}]}}),
        ("POST", f"/v1/jobs/{world['job_a']}/cancel", {}),
        ("DELETE", "/v1/memories/diary/messages/5", {}),
        ("DELETE", "/v1/kbs/akb", {}),
        ("POST", "/v1/kbs/akb/add", {"json": {"issues": str(world["docs"] / "vault.md")}}),
        ("POST", "/v1/kbs/new/build", {"json": {"issues": "i.jsonl", "docs": ["d"], "attributes": "a", "rules": "r"}}),
        ("POST", "/v1/kbs/new/upload", {"files": [("issues", ("x.jsonl", b'{"text": "x"}\n', "application/x-ndjson"))],
                                        "data": {"add": "true"}}),
    ]
    for method, url, kw in writes:
        assert c.request(method, url, headers=ro, **kw).status_code == 403, url
        r = c.request(method, url, headers=old, **kw)
        assert r.status_code == 401 and r.headers["content-type"] == "application/problem+json", url
        assert c.request(method, url, **kw).status_code == 401, url  # no key, now that keys exist
    assert c.get("/v1/trees", headers=old).status_code == 401
    _status, out = _mcp(c, world["keys"]["a_ro"], "remember", {"memory": "diary", "messages": [{"role": "user", "content": "x"}]})
    assert out["result"]["isError"]
    _status, out = _mcp(c, world["keys"]["a_ro"], "forget_message", {"memory": "diary", "position": 5})
    assert out["result"]["isError"] and "read-only" in json.dumps(out)
    assert c.get("/v1/kbs/akb", headers=ro).status_code == 200  # reads are fine
    assert c.get("/v1/kbs/akb", headers=old).status_code == 401
    assert _mcp(c, world["keys"]["a_old"], "list_trees", {})[0] == 401
    assert _mcp(c, None, "list_trees", {})[0] == 401
    assert c.get("/v1/trees/asecret", headers=world["ha"]).json()["tree"]["documents"] == 2
    assert len(c.get("/v1/memories/diary/messages", headers=world["ha"]).json()["messages"]) == 5


def test_a_tenant_builds_only_from_its_own_roots(tmp_path: Path) -> None:
    roots = {t: tmp_path / t for t in ("alpha", "beta", "shared")}
    for t, root in roots.items():
        root.mkdir()
        (root / f"{t}.md").write_text(f"# {t}\n\nNotes of {t}.\n")
    app = make_app(tmp_path, allowed_roots=[roots["shared"]], rate_per_second=1000, rate_burst=1000,
                   tenant_roots={"alpha": [roots["alpha"]], "beta": [roots["beta"]]})
    with TestClient(app, base_url="http://127.0.0.1:8080") as c:
        keys = KeyStore(app.state.service.kt.store)
        ha, hb, hg = ({"Authorization": f"Bearer {keys.create(t)[0]}"} for t in ("alpha", "beta", "gamma"))
        app.state.auth._open_checked = 0.0
        assert c.post("/v1/trees/t/build", headers=ha, json={"paths": [str(roots["alpha"])]}).status_code == 202
        for who, root in ((ha, "beta"), (hb, "alpha"), (ha, "shared"), (hg, "alpha")):
            for raw in (str(roots[root]), str(roots[root] / f"{root}.md"), f"{roots['alpha']}/../{root}/{root}.md"):
                r = c.post("/v1/trees/t/build", headers=who, json={"paths": [raw]})
                assert r.status_code == 403 and "outside" in r.json()["detail"], (root, raw, r.text)
            kb = {"issues": str(roots[root] / "i.jsonl"), "docs": [str(roots[root])], "attributes": "a", "rules": "r"}
            assert c.post("/v1/kbs/k/build", headers=who, json=kb).status_code == 403
        assert c.post("/v1/trees/t/build", headers=hg, json={"paths": [str(roots["shared"])]}).status_code == 202
        _status, out = _mcp(c, keys.create("beta")[0], "build", {"tree": "t", "paths": [str(roots["alpha"])]})
        assert out["result"]["isError"] and "outside" in json.dumps(out)


def test_rate_limit_is_per_key(tmp_path: Path) -> None:
    app = make_app(tmp_path, rate_per_second=0.5, rate_burst=3)
    with TestClient(app) as c:
        keys = KeyStore(app.state.service.kt.store)
        a, _ = keys.create("alpha")
        b, _ = keys.create("beta")
        codes = [c.get("/v1/trees", headers={"Authorization": f"Bearer {a}"}).status_code for _ in range(5)]
        assert codes == [200, 200, 200, 429, 429]
        r = c.get("/v1/trees", headers={"X-API-Key": a})
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        assert c.get("/v1/trees", headers={"Authorization": f"Bearer {b}"}).status_code == 200


def test_keys_cli_create_list_revoke(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from knowtree.cli.app import app

    runner = CliRunner()
    db = str(tmp_path / "k.db")
    out = runner.invoke(app, ["keys", "create", "acme", "--db", db, "--read-only", "--json"])
    assert out.exit_code == 0, out.output
    created = json.loads(out.output)
    assert created["key"].startswith("kt_") and created["read_only"]
    listed = runner.invoke(app, ["keys", "list", "--db", db])
    assert created["id"] in listed.output and created["key"] not in listed.output
    assert runner.invoke(app, ["keys", "revoke", created["id"], "--db", db]).exit_code == 0
    assert "revoked" in runner.invoke(app, ["keys", "list", "--db", db]).output
    assert runner.invoke(app, ["keys", "create", "Bad Name", "--db", db]).exit_code == 1
    from knowtree.store import open_store

    store = open_store(db, create=False)  # the same database the CLI wrote, on either backend
    try:
        stored = store.query("SELECT key_hash FROM api_keys")[0][0]
    finally:
        store.close()
    assert created["key"] not in stored and len(stored) == 64
