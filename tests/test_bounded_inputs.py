"""Bounded inputs (issue 35, findings 4, 6, 7, 8): compressed files inflate within a cap, every number
a request carries is bounded (4xx and in the OpenAPI schema, never a 500), uploads go when their job
ends however it ends and no tenant sees the server's paths, and an oversized body gets 413 with or
without Content-Length."""

from __future__ import annotations

import gzip
import io
import json
import time
import tracemalloc
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

import knowtree
from knowtree.errors import InputError
from knowtree.ingest.kb_inputs import load_kb_docs, load_raw_issues
from knowtree.ingest.limits import InflateLimitError, check_zip, inflate_limit
from knowtree.testing.models import KeywordModel
from server_helpers import CHAT, make_app, wait_job
from test_kb import write_inputs

MiB = 1 << 20


def _bomb(path: Path, inflated: int) -> Path:
    """A gzip file of `inflated` zero bytes (a few KB on disk)."""
    with gzip.open(path, "wb", compresslevel=9) as f:
        block = b"\0" * MiB
        for _ in range(inflated // MiB):
            f.write(block)
    return path


def _kb_upload(files: dict[str, str], docs: tuple[str, bytes]) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("issues", ("issues.jsonl", Path(files["issues"]).read_bytes(), "application/x-ndjson")),
            ("docs", (docs[0], docs[1], "application/gzip")),
            ("attributes", ("attrs.toml", Path(files["attributes"]).read_bytes(), "application/toml")),
            ("rules", ("rules.toml", Path(files["rules"]).read_bytes(), "application/toml"))]


def _uploads(tmp_path: Path) -> list[Path]:
    root = tmp_path / "kb.db.uploads"
    return list(root.iterdir()) if root.is_dir() else []


def _uploads_after_the_end(tmp_path: Path, seconds: float = 10.0) -> list[Path]:
    """The upload folders left once the worker's end-of-job step ran: it removes them right after it
    records the job's end (`JobWorker`: only the worker that wrote the end cleans up), so a client
    that saw the end may look a moment before the removal."""
    deadline = time.monotonic() + seconds
    while (left := _uploads(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


# -- 1. decompression with a cap ------------------------------------------------------------
def test_a_gzip_bomb_stops_at_the_cap_without_inflating(tmp_path: Path) -> None:
    bomb = _bomb(tmp_path / "docs.jsonl.gz", 64 * MiB)
    assert bomb.stat().st_size < MiB
    tracemalloc.start()
    try:
        with inflate_limit(4 * MiB), pytest.raises(InflateLimitError) as exc:
            load_kb_docs([str(bomb)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(bomb) in str(exc.value) and "4,194,304 bytes" in str(exc.value)
    assert isinstance(exc.value, InputError)  # a user's file at fault: a 422 over HTTP
    assert peak < 12 * MiB, f"peak {peak / MiB:.0f} MiB while refusing a 64 MiB bomb"


def test_a_gzip_file_within_the_cap_reads_and_a_broken_one_is_named(tmp_path: Path) -> None:
    good = tmp_path / "issues.jsonl.gz"
    good.write_bytes(gzip.compress(b'{"id": "a", "text": "battery drains overnight"}\n'))
    with inflate_limit(1000):
        assert [i.id for i in load_raw_issues(good)] == ["a"]
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(gzip.compress(b'{"text": "x"}\n' * 100)[:-12] + b"garbage-bytes")
    with pytest.raises(InputError, match=r"broken\.jsonl\.gz: not a readable gzip file"):
        load_raw_issues(broken)


def _docx_like(path: Path, parts: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in parts.items():
            z.writestr(name, data)
    return path


def test_a_zip_bomb_docx_is_refused_before_python_docx_reads_it(tmp_path: Path) -> None:
    bomb = _docx_like(tmp_path / "bomb.docx", {"word/document.xml": b"\0" * (8 * MiB)})
    with inflate_limit(MiB), pytest.raises(InflateLimitError, match=r"bomb\.docx: its parts inflate to over"):
        check_zip(str(bomb))
    # a part whose directory entry understates its size is refused, not trusted
    raw = io.BytesIO(bomb.read_bytes())
    data = bytearray(raw.getvalue())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        info = z.infolist()[0]
    for offset in (data.find(b"PK\x03\x04") + 22, data.find(b"PK\x01\x02") + 24):  # uncompressed size fields
        data[offset:offset + 4] = (100).to_bytes(4, "little")
    liar = tmp_path / "liar.docx"
    liar.write_bytes(bytes(data))
    assert info.file_size == 8 * MiB
    with pytest.raises(InputError, match=r"liar\.docx"):
        check_zip(str(liar), 64 * MiB)
    from knowtree.ingest.docx import load_docx

    pytest.importorskip("docx")
    with inflate_limit(MiB), pytest.raises(InflateLimitError, match=r"bomb\.docx"):
        load_docx(str(bomb))


def test_a_gzip_bomb_upload_is_refused_with_413_naming_the_file(tmp_path: Path) -> None:
    files = write_inputs(tmp_path)
    bomb = _bomb(tmp_path / "bomb.jsonl.gz", 24 * MiB).read_bytes()
    with TestClient(make_app(tmp_path, max_upload_bytes=20 * MiB)) as c:
        r = c.post("/v1/kbs/bomb/upload", files=_kb_upload(files, ("d.jsonl.gz", bomb)), data={"embedder": "hash"})
        assert r.status_code == 413, r.text
        assert "'d.jsonl.gz'" in r.json()["detail"] and "20,971,520" in r.json()["detail"]
        assert str(tmp_path) not in r.text
        assert _uploads(tmp_path) == []  # nothing kept of a refused upload
        docx = _docx_like(tmp_path / "big.docx", {"word/document.xml": b"\0" * (24 * MiB)}).read_bytes()
        r = c.post("/v1/trees/t/upload", files=[("files", ("big.docx", docx, "application/octet-stream"))])
        assert r.status_code == 413 and "'big.docx'" in r.json()["detail"], r.text
    # the cap is configurable apart from the upload limit
    with TestClient(make_app(tmp_path, max_upload_bytes=20 * MiB, max_inflated_bytes=32 * MiB)) as c:
        r = c.post("/v1/kbs/bomb/upload", files=_kb_upload(files, ("d.jsonl.gz", bomb)), data={"embedder": "hash"})
        assert r.status_code == 202, r.text  # accepted, then refused by the loader as JSON (one NUL line)
        job = wait_job(c, r.json()["id"])
        assert job["state"] == "failed" and job["error"].startswith("d.jsonl.gz: line 1"), job


def test_a_server_side_gzip_bomb_fails_its_job_by_name(tmp_path: Path) -> None:
    files = write_inputs(tmp_path)
    _bomb(tmp_path / "bomb.jsonl.gz", 24 * MiB)
    with TestClient(make_app(tmp_path, max_upload_bytes=4 * MiB)) as c:
        body = {**{k: v for k, v in files.items() if k != "docs"}, "docs": [str(tmp_path / "bomb.jsonl.gz")],
                "embedder": "hash"}
        r = c.post("/v1/kbs/b/build", json=body)
        assert r.status_code == 202, r.text
        job = wait_job(c, r.json()["id"])
        assert job["state"] == "failed" and "bomb.jsonl.gz: it inflates to over 4,194,304 bytes" in job["error"]


# -- 2. every number bounded ----------------------------------------------------------------
def test_message_positions_past_sqlite_integers_are_422_not_500(tmp_path: Path) -> None:
    with TestClient(make_app(tmp_path)) as c:
        assert c.post("/v1/memories/chat/messages", json={"messages": CHAT}).status_code == 200
        for query in ("start=9223372036854775808", "end=9223372036854775808", "start=1&end=9223372036854775807",
                      "start=99999999999999999999999"):
            r = c.get(f"/v1/memories/chat/messages?{query}")
            assert r.status_code == 422, (query, r.status_code, r.text)
        r = c.get(f"/v1/memories/chat/messages?start=2&end={2**62}")
        assert r.status_code == 200 and [m["position"] for m in r.json()["messages"]] == [2, 3, 4]


def test_a_synchronous_add_runs_a_bounded_number_of_batches(tmp_path: Path) -> None:
    many = [{"role": "user", "content": f"message {i}"} for i in range(500)]
    with TestClient(make_app(tmp_path)) as c:
        r = c.post("/v1/memories/m/messages", json={"messages": many, "batch_size": 1})
        assert r.status_code == 422 and "background: true" in r.json()["detail"], r.text
        assert c.get("/v1/memories/m/messages").status_code == 404  # nothing stored
        r = c.post("/v1/memories/m/messages", json={"messages": many[:200], "batch_size": 1})
        assert r.status_code == 200 and r.json()["added"] == 200
        r = c.post("/v1/memories/m/messages", json={"messages": many, "batch_size": 1, "background": True})
        assert r.status_code == 202


def test_the_store_guards_positions_past_sqlite_integers(tmp_path: Path) -> None:
    kt = knowtree.open(tmp_path / "kb.db", model=KeywordModel())
    kt.memory("chat").add(CHAT)
    assert kt.store.load_messages("chat", 2**63) == []
    assert len(kt.store.load_messages("chat", -(2**70), 2**70)) == 4
    assert [m["position"] for m in kt.memory("chat").messages(3, 2**63 - 1)] == [3, 4]


def _numbers(node: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if node.get("type") in ("integer", "number"):
            yield where, node
        for key, value in node.items():
            yield from _numbers(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _numbers(value, f"{where}/{i}")


def test_every_number_a_request_carries_is_bounded_in_the_schema(tmp_path: Path) -> None:
    """Parameters and request bodies (not responses): each integer or number has a lower and an upper
    bound, so an out-of-range value is a 422 the schema announces."""
    app = make_app(tmp_path, jobs_worker=False)
    spec = app.openapi()
    inputs: list[tuple[str, Any]] = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            inputs += [(f"{method} {path} ?{p['name']}", p["schema"]) for p in op.get("parameters", [])]
            for media, content in (op.get("requestBody") or {}).get("content", {}).items():
                inputs.append((f"{method} {path} body {media}", content["schema"]))
    request_models = set()

    def refs(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if ref and ref.split("/")[-1] not in request_models:
                request_models.add(ref.split("/")[-1])
                refs(spec["components"]["schemas"][ref.split("/")[-1]])
            for v in node.values():
                refs(v)
        elif isinstance(node, list):
            for v in node:
                refs(v)

    for _, schema in inputs:
        refs(schema)
    inputs += [(f"model {name}", spec["components"]["schemas"][name]) for name in sorted(request_models)]
    unbounded = [
        f"{where}{path}" for where, schema in inputs for path, n in _numbers(schema, "")
        if not ({"minimum", "exclusiveMinimum"} & set(n) and {"maximum", "exclusiveMaximum"} & set(n))
    ]
    assert len(inputs) > 20 and unbounded == []


def test_the_mcp_tools_announce_and_enforce_their_number_bounds(tmp_path: Path) -> None:
    headers = {"Accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}
    with TestClient(make_app(tmp_path), base_url="http://127.0.0.1:8080") as c:
        tools = c.post("/mcp", headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).json()
        numbers = {(t["name"], name): prop for t in tools["result"]["tools"]
                   for name, prop in t["inputSchema"]["properties"].items() if prop.get("type") == "integer"}
        assert set(numbers) == {("forget_message", "position"), ("recall", "budget_tokens"), ("get_node_messages", "limit")}
        assert all("minimum" in p and "maximum" in p for p in numbers.values()), numbers
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "forget_message", "arguments": {"memory": "chat", "position": 2**63}}}
        out = c.post("/mcp", headers=headers, json=call).json()["result"]
        assert out["isError"] and "less than or equal" in out["content"][0]["text"]


# -- 3. uploads go when their job ends; no server paths -------------------------------------
def test_a_failed_upload_job_removes_its_files_and_names_them_as_uploaded(tmp_path: Path) -> None:
    with TestClient(make_app(tmp_path)) as c:
        r = c.post("/v1/trees/t/upload", files=[("files", ("report.pdf", b"%PDF-1.4 not really a pdf" * 10, "application/pdf"))])
        assert r.status_code == 202, r.text
        job = wait_job(c, r.json()["id"])
        assert job["state"] == "failed", job
        assert job["error"].startswith("report.pdf: "), job["error"]
        assert str(tmp_path) not in json.dumps(job) and "uploads" not in job["error"]
        assert _uploads_after_the_end(tmp_path) == []
        listed = c.get("/v1/jobs").json()
        assert str(tmp_path) not in json.dumps(listed)


def test_a_job_cancelled_while_queued_removes_its_uploads(tmp_path: Path) -> None:
    with TestClient(make_app(tmp_path, jobs_worker=False)) as c:
        r = c.post("/v1/trees/t/upload", files=[("files", ("a.md", b"# A\nalpha text here\n", "text/markdown"))])
        assert r.status_code == 202 and r.json()["state"] == "queued"
        assert len(_uploads(tmp_path)) == 1
        out = c.post(f"/v1/jobs/{r.json()['id']}/cancel").json()
        assert out["state"] == "cancelled"
        assert _uploads(tmp_path) == []


def test_a_failed_kb_upload_job_removes_its_files_and_kb_citations_name_uploads_by_name(tmp_path: Path) -> None:
    files = write_inputs(tmp_path)
    docs = Path(files["docs"]).read_bytes()
    with TestClient(make_app(tmp_path)) as c:
        bad = gzip.compress(docs + b"{not json\n")
        r = c.post("/v1/kbs/k/upload", files=_kb_upload(files, ("d.jsonl.gz", bad)), data={"embedder": "hash"})
        assert r.status_code == 202, r.text
        job = wait_job(c, r.json()["id"])
        assert job["state"] == "failed" and job["error"].startswith("d.jsonl.gz: line "), job
        assert _uploads_after_the_end(tmp_path) == []
        r = c.post("/v1/kbs/k/upload", files=_kb_upload(files, ("d.jsonl.gz", gzip.compress(docs))),
                   data={"embedder": "hash"})
        assert wait_job(c, r.json()["id"])["state"] == "done"
        out = c.post("/v1/kbs/k/ask", json={"query": "headphones will not pair with android"}).json()
        assert out["passages"] and {p["source"] for p in out["passages"]} == {"d.jsonl.gz"}
        assert str(tmp_path) not in json.dumps(out)


def test_a_server_start_removes_old_upload_folders_no_job_needs(tmp_path: Path) -> None:
    import os

    root = tmp_path / "kb.db.uploads"
    old, fresh, other = root / ("a" * 32), root / ("b" * 32), root / "keep-me"
    for d in (old, fresh, other):
        d.mkdir(parents=True)
        (d / "x.md").write_text("# x\n")
    os.utime(old, (0, 0))
    os.utime(other, (0, 0))
    with TestClient(make_app(tmp_path)) as c:
        assert c.get("/v1/health").status_code == 200
    assert not old.exists() and fresh.exists() and other.exists()
    queued = root / ("c" * 32)  # a queued job's uploads stay, however old
    queued.mkdir()
    os.utime(queued, (0, 0))
    service = make_app(tmp_path, jobs_worker=False).state.service
    service.jobs.create("local", "build", "t", {"paths": [str(queued / "x.md")], "uploads": str(queued)})
    assert service.sweep_uploads() == 0 and queued.exists()


def test_a_bad_uploaded_file_is_refused_by_the_name_it_was_uploaded_as(tmp_path: Path) -> None:
    files = write_inputs(tmp_path)
    with TestClient(make_app(tmp_path)) as c:
        up = _kb_upload(files, ("docs.jsonl", Path(files["docs"]).read_bytes()))
        up[0] = ("issues", ("issues.jsonl", b"{not json\n", "application/x-ndjson"))
        r = c.post("/v1/kbs/k/upload", files=up, data={"embedder": "hash"})
        assert r.status_code == 422 and r.json()["detail"].startswith("issues.jsonl: line 1"), r.text
        assert str(tmp_path) not in r.text and _uploads(tmp_path) == []
        r = c.post("/v1/kbs/k/upload", files=_kb_upload(files, ("docs.jsonl", Path(files["docs"]).read_bytes())),
                   data={"embedder": "hash"})
        assert r.status_code == 202 and wait_job(c, r.json()["id"])["state"] == "done"
        r = c.put("/v1/kbs/k/rules/upload", files=[("rules", ("rules.toml", b"[[rules]]\ntext = 1\n", "application/toml"))])
        assert r.status_code == 422 and r.json()["detail"].startswith("rules.toml: rule 1"), r.text
        assert str(tmp_path) not in r.text


# -- 4. 413 with or without Content-Length ---------------------------------------------------
def _chunked(total: int, piece: bytes = b" " * 4096) -> Iterator[bytes]:
    yield b'{"question": "'
    sent = 0
    while sent < total:
        yield piece
        sent += len(piece)
    yield b'"}'


@pytest.mark.parametrize("chunked", [True, False])
def test_an_oversized_body_is_413_with_or_without_content_length(tmp_path: Path, chunked: bool) -> None:
    with TestClient(make_app(tmp_path, max_request_bytes=10_000)) as c:
        body: Any = _chunked(50_000) if chunked else b"".join(_chunked(50_000))
        r = c.post("/v1/trees/x/ask", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 413, (r.status_code, r.text)
        assert r.headers["content-type"] == "application/problem+json" and "10,000 bytes" in r.json()["detail"]
        # a body under the limit, chunked, is read as usual
        r = c.post("/v1/trees/x/ask", content=iter([b'{"question": ', b'"hi"}']), headers={"content-type": "application/json"})
        assert r.status_code == 404


def test_an_oversized_chunked_multipart_upload_is_413(tmp_path: Path) -> None:
    boundary = "kt-boundary"

    def multipart() -> Iterator[bytes]:
        yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"a.md\"\r\n"
               "Content-Type: text/markdown\r\n\r\n").encode()
        for _ in range(64):
            yield b"# words\n" * 512  # 4 KiB a piece, 256 KiB in all
        yield f"\r\n--{boundary}--\r\n".encode()

    with TestClient(make_app(tmp_path, max_upload_bytes=100_000)) as c:
        r = c.post("/v1/trees/t/upload", content=multipart(),
                   headers={"content-type": f"multipart/form-data; boundary={boundary}"})
        assert r.status_code == 413, (r.status_code, r.text)
        assert "100,000 bytes" in r.json()["detail"]
        assert _uploads(tmp_path) == []
