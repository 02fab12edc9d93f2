"""Knowledge bases over HTTP (in-process): build and add as jobs (server-side paths and uploads),
list, show, ask (what `knowtree kb ask --json` prints), export, delete; and the `kb_ask` MCP tool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

from fastapi.testclient import TestClient

from server_helpers import make_app, sse_events, wait_job
from test_kb import write_inputs

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}


def build_kb(c: TestClient, name: str, files: dict[str, str], headers: dict[str, str] | None = None) -> dict[str, Any]:
    body = {"issues": files["issues"], "docs": [files["docs"]], "attributes": files["attributes"],
            "rules": files["rules"], "embedder": "hash", "threshold": 0.4}
    r = c.post(f"/v1/kbs/{name}/build", json=body, headers=headers or {})
    assert r.status_code == 202, r.text
    assert r.json()["kind"] == "kb-build" and r.json()["tree"] == name
    job = wait_job(c, r.json()["id"], headers)
    assert job["state"] == "done", job
    return job


@pytest.fixture
def client(tmp_path: Path):
    with TestClient(make_app(tmp_path), base_url="http://127.0.0.1:8080") as c:
        yield c


def test_kb_build_list_show_ask_export_add_delete(client: TestClient, tmp_path: Path) -> None:
    c = client
    files = write_inputs(tmp_path)
    job = build_kb(c, "hp", files)
    assert job["report"]["raw_issues"] == 7 and job["report"]["kb"] == "hp"
    assert [k["name"] for k in c.get("/v1/kbs").json()] == ["hp"]
    shown = c.get("/v1/kbs/hp").json()
    assert shown["name"] == "hp" and shown["raw_issues"] == 7 and shown["themes"][0]["parents"]

    answer = c.post("/v1/kbs/hp/ask", json={"query": "battery drains fast"}).json()
    assert answer["issue"]["id"] and answer["match"] != "none" and answer["solution"] and answer["trace"]
    assert answer["passages"][0]["doc_id"] == "battery" and "text" in answer["passages"][0]
    none = c.post("/v1/kbs/hp/ask", json={"query": "battery drains fast", "passages": 0, "solve": False}).json()
    assert none["passages"] == []
    assert c.post("/v1/kbs/hp/ask", json={"query": "x", "metadata": "bogus"}).status_code == 422

    r = c.get("/v1/kbs/hp/export")
    assert r.headers["content-type"].startswith("application/x-ndjson")
    rows = [json.loads(line) for line in r.text.splitlines()]
    assert answer["issue"]["id"] in {row["id"] for row in rows} and all("members" in row for row in rows)
    assert c.get("/v1/kbs/hp/export", params={"format": "json"}).json() == rows

    (tmp_path / "more.jsonl").write_text(json.dumps({"id": "b9", "text": "battery dies fast when cold"}) + "\n")
    r = c.post("/v1/kbs/hp/add", json={"issues": str(tmp_path / "more.jsonl")})
    assert r.status_code == 202, r.text
    assert wait_job(c, r.json()["id"])["state"] == "done"
    assert c.get("/v1/kbs/hp").json()["raw_issues"] == 8

    again = c.post("/v1/kbs/hp/build", json={"issues": files["issues"], "docs": [files["docs"]],
                                             "attributes": files["attributes"], "rules": files["rules"]})
    assert again.status_code == 409
    outside = c.post("/v1/kbs/x/build", json={"issues": "/etc/passwd", "docs": ["/etc"], "attributes": "/a", "rules": "/b"})
    assert outside.status_code == 403
    (tmp_path / "bad.jsonl").write_text("not json\n")
    bad = c.post("/v1/kbs/x/build", json={**{k: files[k] for k in ("attributes", "rules")},
                                          "issues": str(tmp_path / "bad.jsonl"), "docs": [files["docs"]]})
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"

    assert c.delete("/v1/kbs/hp").json() == {"deleted": "hp"}
    assert c.get("/v1/kbs/hp").status_code == 404
    assert c.post("/v1/kbs/hp/ask", json={"query": "battery"}).status_code == 404
    assert c.get("/v1/kbs").json() == []


def test_kb_upload_build_and_mcp_kb_ask(client: TestClient, tmp_path: Path) -> None:
    c = client
    files = write_inputs(tmp_path)
    up = [("issues", ("issues.jsonl", Path(files["issues"]).read_bytes(), "application/x-ndjson")),
          ("docs", ("docs.jsonl", Path(files["docs"]).read_bytes(), "application/x-ndjson")),
          ("attributes", ("attrs.toml", Path(files["attributes"]).read_bytes(), "application/toml")),
          ("rules", ("rules.toml", Path(files["rules"]).read_bytes(), "application/toml"))]
    r = c.post("/v1/kbs/up/upload", files=up, data={"embedder": "hash"})
    assert r.status_code == 202, r.text
    with c.stream("GET", f"/v1/jobs/{r.json()['id']}/events") as events:  # progress over SSE, like a tree build
        seen = sse_events(events.read().decode())
    assert seen[-1][0] == "done" and all(e == "progress" for e, _ in seen[:-1])
    job = seen[-1][1]
    assert job["kind"] == "kb-build" and job["report"]["raw_issues"] == 7
    assert (tmp_path / "kb.db.uploads").is_dir() and not list((tmp_path / "kb.db.uploads").iterdir())  # uploads gone
    assert c.post("/v1/kbs/up2/upload", files=up[:1]).status_code == 400  # a build needs all four
    more = [("issues", ("more.csv", b"text\nheadphones hiss in a quiet room\n", "text/csv"))]
    r = c.post("/v1/kbs/up/upload", files=more, data={"add": "true"})
    assert r.status_code == 202 and wait_job(c, r.json()["id"])["state"] == "done"
    bad = c.post("/v1/kbs/up/upload", files=[("issues", ("x.exe", b"MZ", "application/octet-stream"))], data={"add": "true"})
    assert bad.status_code == 415

    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "kb_ask", "arguments": {"kb": "up", "query": "my headphones will not pair with android"}}}
    out = c.post("/mcp", headers=MCP_HEADERS, json=call).json()["result"]
    assert not out["isError"], out
    data = out["structuredContent"] if "structuredContent" in out else json.loads(out["content"][0]["text"])
    assert data["kb"] == "up" and data["issue"]["id"] and "citations" in data and data["passages"]
    call["params"]["arguments"]["kb"] = "nope"
    out = c.post("/mcp", headers=MCP_HEADERS, json=call).json()["result"]
    assert out["isError"] and "yours: up" in json.dumps(out)


def test_kb_build_job_cancels_and_resumes_after_a_dead_server(tmp_path: Path) -> None:
    from knowtree.store import kb as kbstore
    from knowtree.store.kb import KBRecord

    files = write_inputs(tmp_path)
    body = {"issues": files["issues"], "docs": [files["docs"]], "attributes": files["attributes"],
            "rules": files["rules"], "embedder": "hash"}
    app = make_app(tmp_path, jobs_worker=False)
    svc = app.state.service
    with TestClient(app, base_url="http://127.0.0.1:8080") as c:
        queued = c.post("/v1/kbs/gone/build", json=body).json()
        assert queued["state"] == "queued"
        assert c.post(f"/v1/jobs/{queued['id']}/cancel").json()["state"] == "cancelled"
        job = c.post("/v1/kbs/hp/build", json=body).json()
    # a server died while building: the job was running and left a half-built KB behind
    from knowtree.server.jobs import JobStore

    claimed = JobStore(svc.kt.store, lease_seconds=-1).claim_next("gone-host|-|1|x")  # lease expired
    assert claimed.id == job["id"] and claimed.attempts == 1
    kbstore.create_kb(svc.kt.store, KBRecord("hp", "half", {}, [], {"embedder": "hash"}, "keyword"))
    assert svc.jobs.takeovers() == 1
    with TestClient(make_app(tmp_path), base_url="http://127.0.0.1:8080") as c:  # restarted: the worker resumes it
        done = wait_job(c, job["id"])
        assert done["state"] == "done" and done["attempts"] == 2 and done["report"]["raw_issues"] == 7
        assert c.get("/v1/kbs/hp").json()["domain"] == "wireless headphones support"


def test_an_add_queued_for_a_deleted_kb_fails_without_naming_other_kbs(tmp_path: Path) -> None:
    from knowtree.errors import NotFoundError
    from knowtree.server.tenancy import KeyStore

    files = write_inputs(tmp_path)
    app = make_app(tmp_path, jobs_worker=False)  # the add waits in the queue while the KB goes
    svc = app.state.service
    for stored in ("alpha:secretkb", "beta:mine"):
        svc.kt.kb(stored, embedder="hash").build(**files)
    with TestClient(app, base_url="http://127.0.0.1:8080") as c:
        hb = {"Authorization": f"Bearer {KeyStore(svc.kt.store).create('beta')[0]}"}
        app.state.auth._open_checked = 0.0
        job = c.post("/v1/kbs/mine/add", headers=hb, json={"issues": files["issues"]}).json()
        assert c.delete("/v1/kbs/mine", headers=hb).status_code == 200
        with pytest.raises(NotFoundError) as err:
            svc.kbs.run_job(svc.jobs.get(job["id"]), lambda _: None)
        assert "secretkb" not in str(err.value) and "'mine'" in str(err.value)


def test_kb_rules_replaced_from_a_path_or_an_upload_and_stored_solutions_go_stale(client: TestClient, tmp_path: Path) -> None:
    c = client
    files = write_inputs(tmp_path)
    build_kb(c, "hp", files)
    first = c.post("/v1/kbs/hp/ask", json={"query": "battery drains fast", "metadata": "keywords"}).json()
    assert first["solution"] and first["status"] != "stale"
    new_rules = tmp_path / "new_rules.toml"
    new_rules.write_text('[[rules]]\ntext = "Never tell the user to open the case."\nforbidden = ["open the case"]\n')
    r = c.put("/v1/kbs/hp/rules", json={"rules": str(new_rules)})
    assert r.status_code == 200, r.text
    assert r.json() == {"kb": "hp", "rules": 1, "stale": 1}  # the one solution written so far
    assert [x["forbidden"] for x in c.get("/v1/kbs/hp/rules").json()] == [["open the case"]]
    shown = c.get("/v1/kbs/hp").json()
    statuses = [p["status"] for t in shown["themes"] for p in t["parents"]]
    assert statuses.count("stale") == 1
    again = c.post("/v1/kbs/hp/ask", json={"query": "battery drains fast", "metadata": "keywords"}).json()
    assert again["issue"]["id"] == first["issue"]["id"] and again["status"] != "stale"  # regenerated
    row = next(x for x in c.get("/v1/kbs/hp/export", params={"format": "json"}).json() if x["id"] == first["issue"]["id"])
    assert row["status"] != "stale" and row["compliance"]  # checked again, under the new rules
    import knowtree
    from knowtree.store import kb as kbstore

    with knowtree.open(tmp_path / "kb.db", model="keyword") as kt:
        assert [r["forbidden"] for r in kbstore.kb_record(kt.store, "hp").rules] == [["open the case"]]

    # bad input changes nothing: a file outside the roots, a bad file (named), an unknown KB
    assert c.put("/v1/kbs/hp/rules", json={"rules": "/etc/passwd"}).status_code == 403
    (tmp_path / "bad.toml").write_text("[[rules]]\nforbidden = 3\n")
    bad = c.put("/v1/kbs/hp/rules", json={"rules": str(tmp_path / "bad.toml")})
    assert bad.status_code == 422 and "bad.toml" in bad.text
    assert c.put("/v1/kbs/nope/rules", json={"rules": str(new_rules)}).status_code == 404
    assert c.put("/v1/kbs/hp/rules", json={"rules": str(new_rules)}).json()["stale"] == 1  # the regenerated one

    up = c.put("/v1/kbs/hp/rules/upload", files=[("rules", ("rules.toml", Path(files["rules"]).read_bytes(), "application/toml"))])
    assert up.status_code == 200, up.text
    assert up.json()["rules"] == 2
    assert not list((tmp_path / "kb.db.uploads").iterdir())  # the upload is not kept
    exe = c.put("/v1/kbs/hp/rules/upload", files=[("rules", ("x.exe", b"MZ", "application/octet-stream"))])
    assert exe.status_code == 415
