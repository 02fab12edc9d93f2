"""The HTTP API in-process (TestClient runs the app's lifespan: the job worker and the MCP manager)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

from fastapi.testclient import TestClient

from conftest import write_corpus
from server_helpers import CHAT, build, make_app, sse_events, wait_job


@pytest.fixture
def client(tmp_path: Path):
    with TestClient(make_app(tmp_path)) as c:
        yield c


@pytest.fixture
def built(client: TestClient, tmp_path: Path) -> TestClient:
    paths = write_corpus(tmp_path / "docs")
    build(client, "notes", [str(Path(paths[0]).parent)])
    return client


def test_health_openapi_and_docs_are_offline(client: TestClient) -> None:
    assert client.get("/v1/health").json()["status"] == "ok"
    schema = client.get("/openapi.json").json()
    assert schema["openapi"].startswith("3") and len(schema["paths"]) >= 15
    docs = client.get("/docs").text
    assert "/docs/assets/swagger-ui-bundle.js" in docs and "https://" not in docs
    assert client.get("/docs/assets/swagger-ui-bundle.js").status_code == 200


def test_build_list_outline_node_search_ask_retrieve_ledger(built: TestClient) -> None:
    c = built
    trees = c.get("/v1/trees").json()
    assert [t["name"] for t in trees] == ["notes"] and trees[0]["leaves"] == 3
    outline = c.get("/v1/trees/notes").json()
    root = outline["root"]
    assert len(root["children"]) == 3 and outline["tree"]["kind"] == "document"
    leaf = root["children"][0]
    view = c.get(f"/v1/trees/notes/nodes/{leaf['id'][:8]}").json()
    assert view["id"] == leaf["id"] and view["text"] and view["parent"] == root["id"]
    rootview = c.get(f"/v1/trees/notes/nodes/{root['id']}").json()
    assert {ch["id"] for ch in rootview["children"]} == {ch["id"] for ch in root["children"]}
    assert c.get("/v1/trees/notes", params={"depth": 0}).json()["root"]["more"] == 3

    hits = c.get("/v1/trees/notes/search", params={"q": "PostgreSQL"}).json()["hits"]
    assert hits and any("database.md" in h["spans"][0]["file"] for h in hits if h["spans"])

    answer = c.post("/v1/trees/notes/ask", json={"question": "Who chose PostgreSQL?"}).json()
    assert answer["status"] in ("complete", "partial") and "Bruno" in (answer["answer"] or "")
    assert answer["citations"][0]["file"].endswith("database.md") and answer["trace"]
    search_mode = c.post("/v1/trees/notes/ask", json={"question": "Who chose PostgreSQL?", "mode": "search"})
    assert search_mode.status_code == 200

    ev = c.post("/v1/trees/notes/retrieve", json={"question": "Who chose PostgreSQL?", "budget_tokens": 200}).json()
    assert ev["method"] == "tree" and ev["evidence"][0]["citation"]["file"].endswith("database.md")
    assert sum(len(e["text"]) for e in ev["evidence"]) <= 800

    runs = c.get("/v1/ledger", params={"tree": "notes"}).json()
    assert {r["kind"] for r in runs} >= {"build", "ask"} and all(r["tree"] == "notes" for r in runs)


def test_ask_streams_steps_then_answer(built: TestClient) -> None:
    with built.stream("POST", "/v1/trees/notes/ask", json={"question": "Who chose PostgreSQL?", "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.read().decode())
    kinds = [e for e, _ in events]
    assert kinds[-1] == "answer" and "step" in kinds and kinds.index("step") < kinds.index("answer")
    assert "Bruno" in events[-1][1]["answer"]


def test_job_events_stream_progress_and_report(client: TestClient, tmp_path: Path) -> None:
    paths = write_corpus(tmp_path / "docs")
    job = client.post("/v1/trees/t/build", json={"paths": paths}).json()
    with client.stream("GET", f"/v1/jobs/{job['id']}/events") as r:
        events = sse_events(r.read().decode())
    assert events[-1][0] == "done" and events[-1][1]["report"]["leaves"] == 3
    assert all(e == "progress" for e, _ in events[:-1])
    assert client.get("/v1/jobs").json()[0]["id"] == job["id"]
    # the job embedded the new index (the default embedder), so the first question does not
    kt = client.app.state.service.kt  # type: ignore[attr-defined]
    entries = len(kt.tree_index("t").rows)
    assert events[-1][1]["report"]["vectors"] == entries > 0
    assert kt.store.read(lambda c: c.execute("SELECT count(DISTINCT id) FROM tree_index_vec WHERE tree = 't'")
                         .fetchone()[0]) == entries


def test_a_failed_embedding_after_a_build_leaves_the_build_done(client: TestClient, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str, embedder: object = "default") -> int:
        raise OSError("disk full")

    monkeypatch.setattr(client.app.state.service.kt, "embed_index", broken)  # type: ignore[attr-defined]
    job = build(client, "t", write_corpus(tmp_path / "docs"))
    assert job["report"]["leaves"] == 3 and job["report"]["vectors_error"] == "OSError: disk full"
    assert "vectors" not in job["report"]
    ans = client.post("/v1/trees/t/retrieve", json={"question": "Who chose PostgreSQL?"}).json()
    assert ans["evidence"]  # questions embed what they need themselves


def test_upload_build_and_delete_document_and_tree(client: TestClient) -> None:
    files = [("files", ("a.md", b"# Alpha\n\nThe alpha team meets on Mondays.\n", "text/markdown")),
             ("files", ("b.txt", b"Beta launches in May in Oslo.\n", "text/plain"))]
    r = client.post("/v1/trees/up/upload", files=files)
    assert r.status_code == 202, r.text
    job = wait_job(client, r.json()["id"])
    assert job["state"] == "done" and job["report"]["documents"] == 2
    docs = client.get("/v1/trees/up").json()["tree"]["documents"]
    assert docs == 2
    files = {s["file"] for ch in client.get("/v1/trees/up").json()["root"]["children"] for s in ch["spans"]}
    assert files == {"a.md", "b.txt"}  # named by the upload, not by the server's upload folder
    r = client.delete("/v1/trees/up/documents", params={"path": "b.txt"})
    assert r.status_code == 200, r.text
    assert client.get("/v1/trees/up").json()["tree"]["documents"] == 1
    assert client.delete("/v1/trees/up/documents", params={"path": "zzz.txt"}).status_code == 404
    assert client.delete("/v1/trees/up").json() == {"deleted": "up"}
    assert client.get("/v1/trees/up").status_code == 404
    bad = client.post("/v1/trees/up/upload", files=[("files", ("x.exe", b"MZ", "application/octet-stream"))])
    assert bad.status_code == 415 and bad.headers["content-type"] == "application/problem+json"


def test_memories_add_list_ask_retrieve(client: TestClient) -> None:
    r = client.post("/v1/memories", json={"name": "chat", "messages": CHAT[:2]})
    assert r.status_code == 201 and r.json()["messages"] == 2
    r = client.post("/v1/memories/chat/messages", json={"messages": CHAT[2:]})
    assert r.json()["messages"] == 4
    msgs = client.get("/v1/memories/chat/messages", params={"start": 3}).json()["messages"]
    assert [m["position"] for m in msgs] == [3, 4] and msgs[0]["name"] == "Ann"
    ev = client.post("/v1/trees/chat/retrieve", json={"question": "What is the cat called?"}).json()
    assert any("Pixel" in e["text"] for e in ev["evidence"]) and ev["evidence"][0]["citation"]["line_start"] >= 1
    ans = client.post("/v1/trees/chat/ask", json={"question": "What is the name of Maria's cat?"}).json()
    assert ans["citations"] and ans["citations"][0]["speaker"]
    walked = client.post("/v1/trees/chat/ask", json={"question": "What is the name of Maria's cat?", "mode": "walk"})
    assert walked.status_code == 200 and walked.json()["citations"][0]["speaker"]  # the topic walk
    assert client.post("/v1/trees/chat/ask", json={"question": "x", "mode": "search"}).status_code == 400
    job = client.post("/v1/memories/chat/messages", json={"messages": [CHAT[0]], "background": True})
    assert job.status_code == 202 and wait_job(client, job.json()["id"])["state"] == "done"


def test_delete_one_message_of_a_memory(client: TestClient) -> None:
    client.post("/v1/memories", json={"name": "chat", "messages": CHAT})
    r = client.delete("/v1/memories/chat/messages/3")
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["memory"] == "chat" and out["position"] == 3 and out["messages"] == 3 and out["removed"]
    msgs = client.get("/v1/memories/chat/messages").json()["messages"]
    assert [m["position"] for m in msgs] == [1, 2, 4] and all("Pixel" not in m["content"] or m["position"] == 4 for m in msgs)
    assert "Maria adopted" not in client.get("/v1/trees/chat").text  # nor in any summary of the outline
    assert client.delete("/v1/memories/chat/messages/3").status_code == 404
    assert client.delete("/v1/memories/nope/messages/1").status_code == 404
    assert client.delete("/v1/memories/chat/messages/0").status_code == 422


def test_problem_details_and_limits(tmp_path: Path) -> None:
    with TestClient(make_app(tmp_path, max_request_bytes=2000, allowed_roots=[tmp_path / "only"])) as c:
        r = c.get("/v1/trees/missing")
        assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
        assert set(r.json()) >= {"type", "title", "status", "detail"} and "Traceback" not in r.text
        r = c.post("/v1/trees/x/ask", json={"question": ""})
        assert r.status_code == 422 and r.json()["errors"]
        r = c.post("/v1/trees/x/ask", json={"question": "q" * 3000, "mode": "walk"})
        assert r.status_code == 413
        r = c.post("/v1/trees/x/build", json={"paths": ["/etc"]})
        assert r.status_code == 403 and "outside" in r.json()["detail"]
        r = c.post("/v1/trees/x/build", json={"paths": [str(tmp_path / "only" / "a\x00b")]})
        assert r.status_code == 400 and "NUL" in r.json()["detail"]  # not a 500 from resolving it
        assert c.get("/v1/trees/bad name!").status_code == 422  # the name pattern is in the schema
        assert c.get("/v1/jobs/zzz").status_code == 422 and c.get("/v1/jobs/abc").status_code == 404


def test_cancel_a_queued_job(tmp_path: Path) -> None:
    paths = write_corpus(tmp_path / "docs")
    with TestClient(make_app(tmp_path, jobs_worker=False)) as c:
        job = c.post("/v1/trees/t/build", json={"paths": paths}).json()
        assert job["state"] == "queued"
        out = c.post(f"/v1/jobs/{job['id']}/cancel").json()
        assert out["state"] == "cancelled" and out["cancel_requested"]


def test_ui_outline_renders_without_javascript(built: TestClient) -> None:
    page = built.get("/ui", params={"tree": "notes"}).text
    assert page.count('role="treeitem"') == 4 and "<details open>" in page
    assert 'src="/ui/static/app.js"' in page and "http://" not in page and "https://" not in page
    leaf = built.get("/v1/trees/notes").json()["root"]["children"][2]
    page = built.get("/ui", params={"tree": "notes", "node": leaf["id"]}).text
    assert 'class="text"' in page and leaf["id"] in page
    assert built.get("/ui/static/app.js").status_code == 200
    assert built.get("/ui/static/nope.js").status_code == 404


def test_loopback_guard_refuses_rebinding_and_cross_site_writes(client: TestClient) -> None:
    r = client.get("/v1/trees", headers={"Host": "evil.example:8080"})
    assert r.status_code == 403 and r.headers["content-type"] == "application/problem+json"
    r = client.post("/v1/trees/x/ask", json={"question": "q"}, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403
    ok = client.post("/v1/trees/x/ask", json={"question": "q"}, headers={"Origin": "http://127.0.0.1:8080"})
    assert ok.status_code == 404  # same-site: reaches the API (no such tree)
    assert client.get("/v1/health", headers={"Host": "localhost:8080"}).status_code == 200


def test_enrich_a_zero_call_tree_as_a_job(tmp_path: Path) -> None:
    import knowtree
    from knowtree.testing.models import KeywordModel

    paths = write_corpus(tmp_path / "docs")
    with knowtree.open(tmp_path / "kb.db", model=KeywordModel(), summaries="none") as kt:
        assert kt.build([str(Path(paths[0]).parent)], tree="notes").usage.calls == 0
    with TestClient(make_app(tmp_path)) as c:
        outline = c.get("/v1/trees/notes").json()
        assert not outline["root"]["summary"]  # built without the model
        r = c.post("/v1/trees/notes/enrich", json={})
        assert r.status_code == 202 and r.json()["kind"] == "enrich"
        job = wait_job(c, r.json()["id"])
        assert job["state"] == "done", job
        assert job["report"]["enriched"] == 4 and job["report"]["usage"]["calls"] == 4 and job["report"]["tree"] == "notes"
        assert c.get("/v1/trees/notes").json()["root"]["summary"]  # the server's cached view sees it
        again = wait_job(c, c.post("/v1/trees/notes/enrich", json={"root": True}).json()["id"])
        assert again["report"]["enriched"] == 0 and again["report"]["kept"] == 4
        assert c.post("/v1/trees/nope/enrich", json={}).status_code == 404
        assert c.post("/v1/trees/notes/enrich", json={"bogus": 1}).status_code == 422
        ledger = c.get("/v1/ledger", params={"tree": "notes"}).json()
        assert [r["kind"] for r in ledger].count("enrich") == 2
