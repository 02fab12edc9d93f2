"""`knowtree mcp` as a subprocess, driven by the official MCP SDK client over stdio."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from server_helpers import CHAT


def _command() -> tuple[str, list[str]]:
    script = Path(sys.executable).parent / "knowtree"
    if script.exists():
        return str(script), ["mcp"]
    return sys.executable, ["-c", "from knowtree.cli.app import main; main()", "mcp"]


def test_mcp_stdio_remember_then_recall_with_citations(tmp_path: Path) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    command, args = _command()
    src = str(Path(__file__).parent.parent / "src")
    env = {**os.environ, "KNOWTREE_MODEL": "keyword", "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    params = StdioServerParameters(command=command, args=[*args, "--db", str(tmp_path / "m.db")], env=env, cwd=str(tmp_path))

    async def session() -> dict[str, object]:
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            tools = {t.name: t for t in (await s.list_tools()).tools}
            out: dict[str, object] = {"tools": tools}
            remembered = await s.call_tool("remember", {"memory": "chat", "messages": CHAT})
            out["remember"] = json.loads(remembered.content[0].text)
            recalled = await s.call_tool("recall", {"tree": "chat", "query": "What is the name of Maria's cat?", "budget_tokens": 200})
            out["recall"] = json.loads(recalled.content[0].text)
            asked = await s.call_tool("ask", {"tree": "chat", "question": "Where did Ann move?"})
            out["ask"] = json.loads(asked.content[0].text)
            root = await s.call_tool("view_node", {"tree": "chat"})
            out["root"] = json.loads(root.content[0].text)
            topic = out["root"]["children"][0]["id"]  # type: ignore[index]
            msgs = await s.call_tool("get_node_messages", {"memory": "chat", "node_id": topic})
            out["messages"] = json.loads(msgs.content[0].text)
            missing = await s.call_tool("ask", {"tree": "nope", "question": "x"})
            out["missing"] = missing
            return out

    out = asyncio.run(asyncio.wait_for(session(), 120))
    tools = out["tools"]
    assert {"remember", "recall", "ask", "list_trees", "view_node", "get_node_messages", "build", "job_status"} <= set(tools)  # type: ignore[arg-type]
    assert all(len(t.description or "") > 80 for t in tools.values())  # type: ignore[union-attr]
    assert out["remember"] == {"memory": "chat", "added": 4, "messages": 4, "nodes": out["remember"]["nodes"]}  # type: ignore[index]
    evidence = out["recall"]["evidence"]  # type: ignore[index]
    pixel = [e for e in evidence if "Pixel" in e["text"]]
    assert pixel and pixel[0]["citation"]["line_start"] == 3 and pixel[0]["citation"]["speaker"] == "Ann"
    assert pixel[0]["citation"]["timestamp"].startswith("2024-03-02")
    assert out["ask"]["citations"] and out["ask"]["citations"][0]["speaker"]  # type: ignore[index]
    assert out["messages"]["messages"] and out["messages"]["messages"][0]["content"]  # type: ignore[index]
    assert out["missing"].is_error and "no tree named 'nope'" in out["missing"].content[0].text  # type: ignore[attr-defined]
