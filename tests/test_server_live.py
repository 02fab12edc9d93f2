"""A real uvicorn on 127.0.0.1: SSE over the wire, MCP over streamable HTTP with the SDK client, and
a build job that resumes after the server is killed (SIGKILL) mid-build."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("mcp")

import httpx

import knowtree
from conftest import paragraphs
from server_helpers import free_port, sse_events, start_server


def test_build_resumes_after_sigkill_and_streams_over_the_wire(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "log.txt").write_text(paragraphs(12))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(tmp_path, port)
    try:
        job = httpx.post(f"{base}/v1/trees/t/build", json={"paths": [str(docs)]}).json()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # kill once some leaves are done, before the build ends
            state = httpx.get(f"{base}/v1/jobs/{job['id']}").json()
            if state["progress"].get("done", 0) >= 3:
                break
            time.sleep(0.05)
        assert state["state"] == "running", state
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = Counter((tmp_path / "calls.log").read_text().split())
    with knowtree.open(tmp_path / "kb.db", model="keyword") as kt:  # no half-written tree
        assert kt.trees() == []

    proc = start_server(tmp_path, port)
    try:
        with httpx.stream("GET", f"{base}/v1/jobs/{job['id']}/events", timeout=60) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            events = sse_events(r.read().decode())
        assert events[-1][0] == "done", events[-1]
        final = events[-1][1]
        assert final["attempts"] == 2 and final["report"]["leaves"] == 12
        calls = Counter((tmp_path / "calls.log").read_text().split())
        assert sum(before.values()) >= 3 and max(calls.values()) == 1  # no finished model call repeated
        assert final["report"]["usage"]["cached"] >= sum(before.values())

        with httpx.stream("POST", f"{base}/v1/trees/t/ask", json={"question": "How many ships did keeper number 7 log?", "stream": True}, timeout=60) as r:
            events = sse_events(r.read().decode())
        assert [e for e, _ in events].count("step") >= 1 and events[-1][0] == "answer"

        async def mcp_over_http() -> tuple[list[str], dict[str, object]]:
            from mcp import ClientSession
            from mcp.client.streamable_http import streamable_http_client

            async with streamable_http_client(f"{base}/mcp") as streams, ClientSession(streams[0], streams[1]) as s:
                await s.initialize()
                tools = [t.name for t in (await s.list_tools()).tools]
                out = await s.call_tool("recall", {"tree": "t", "query": "keeper number 7"})
                return tools, json.loads(out.content[0].text)

        tools, recalled = asyncio.run(mcp_over_http())
        assert {"remember", "recall", "ask", "list_trees", "view_node", "get_node_messages", "build"} <= set(tools)
        assert recalled["evidence"] and recalled["evidence"][0]["citation"]["file"].endswith("log.txt")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
