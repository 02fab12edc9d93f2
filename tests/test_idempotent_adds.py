"""A retried or resumed memory add stores each message once: client message ids, an idempotency key
per request (header or body), and a background add that resumes where its saved batches end."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from server_helpers import CHAT, free_port, make_app, serve_cli, stop, wait_done, wait_job


def _client(tmp_path: Path, **config: object) -> TestClient:
    return TestClient(make_app(tmp_path, **config), base_url="http://127.0.0.1:8080")


def _contents(c: TestClient, name: str) -> list[str]:
    return [m["content"] for m in c.get(f"/v1/memories/{name}/messages").json()["messages"]]


def test_a_retried_add_with_the_same_key_stores_once(tmp_path: Path) -> None:
    with _client(tmp_path) as c:
        first = c.post("/v1/memories/m/messages", json={"messages": CHAT}, headers={"Idempotency-Key": "k1"})
        assert first.status_code == 200 and first.json()["added"] == 4
        again = c.post("/v1/memories/m/messages", json={"messages": CHAT}, headers={"Idempotency-Key": "k1"})
        assert again.status_code == 200, again.text
        assert again.json()["added"] == 0 and again.json()["skipped"] == 4
        assert _contents(c, "m") == [m["content"] for m in CHAT]
        other = c.post("/v1/memories/m/messages", json={"messages": CHAT[:1]}, headers={"Idempotency-Key": "k2"})
        assert other.json()["added"] == 1  # another request: the same words are a new message
        assert len(_contents(c, "m")) == 5


def test_a_retry_after_a_partial_add_stores_only_the_rest(tmp_path: Path) -> None:
    """The add died after its first batch: the retry adds the other batches, in order."""
    msgs = [{"role": "user", "content": f"note {i} about the harbour"} for i in range(6)]
    with _client(tmp_path) as c:
        body = {"messages": msgs[:2], "batch_size": 2, "idempotency_key": "batch-1"}
        assert c.post("/v1/memories/m/messages", json=body).json()["added"] == 2  # what was saved
        body = {"messages": msgs, "batch_size": 2, "idempotency_key": "batch-1"}
        r = c.post("/v1/memories/m/messages", json=body).json()
        assert (r["added"], r["skipped"]) == (4, 2)
        assert _contents(c, "m") == [m["content"] for m in msgs]


def test_repeated_words_in_one_request_are_two_messages(tmp_path: Path) -> None:
    ok = [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "ok"}]
    with _client(tmp_path) as c:
        for _ in range(2):
            c.post("/v1/memories/m/messages", json={"messages": ok}, headers={"Idempotency-Key": "same"})
        assert _contents(c, "m") == ["ok", "ok", "ok"]
        c.post("/v1/memories/m/messages", json={"messages": ok})  # no key, no ids: added as sent
        assert len(_contents(c, "m")) == 6


def test_messages_with_ids_already_stored_are_skipped(tmp_path: Path) -> None:
    msgs = [{**m, "id": f"msg-{i}"} for i, m in enumerate(CHAT)]
    with _client(tmp_path) as c:
        assert c.post("/v1/memories/m/messages", json={"messages": msgs[:3]}).json()["added"] == 3
        r = c.post("/v1/memories/m/messages", json={"messages": msgs}).json()
        assert (r["added"], r["skipped"]) == (1, 3)
        stored = c.get("/v1/memories/m/messages").json()["messages"]
        assert [m["id"] for m in stored] == ["msg-0", "msg-1", "msg-2", "msg-3"]
        assert [m["position"] for m in stored] == [1, 2, 3, 4]


def test_the_key_in_header_and_body_must_agree(tmp_path: Path) -> None:
    with _client(tmp_path) as c:
        r = c.post("/v1/memories/m/messages", json={"messages": CHAT, "idempotency_key": "a"},
                   headers={"Idempotency-Key": "b"})
        assert r.status_code == 400 and "differ" in r.text
        r = c.post("/v1/memories/m/messages", json={"messages": CHAT}, headers={"Idempotency-Key": "x" * 300})
        assert 400 <= r.status_code < 500
        assert c.get("/v1/memories/m/messages").status_code == 404  # nothing stored


def test_a_background_add_sent_twice_is_one_job(tmp_path: Path) -> None:
    with _client(tmp_path) as c:
        body = {"messages": CHAT, "background": True}
        a = c.post("/v1/memories/m/messages", json=body, headers={"Idempotency-Key": "bg"})
        b = c.post("/v1/memories/m/messages", json=body, headers={"Idempotency-Key": "bg"})
        assert a.status_code == b.status_code == 202 and a.json()["id"] == b.json()["id"]
        assert wait_job(c, a.json()["id"])["state"] == "done"
        assert _contents(c, "m") == [m["content"] for m in CHAT]


def test_a_background_add_resumed_after_kill_9_stores_each_message_once(tmp_path: Path) -> None:
    """trust.sh item 6, smaller: kill -9 the server mid-add, start it again: N messages, once each, in order."""
    n = 300
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "name": "Ann", "content": f"message number {i} about lisbon",
             "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(1709287200 + 60 * i))} for i in range(n)]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = serve_cli(tmp_path, port, model="slow:0.01")
    try:
        job = httpx.post(f"{base}/v1/memories/bg/messages", timeout=60,
                         json={"messages": msgs, "batch_size": 10, "background": True}).json()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = (httpx.get(f"{base}/v1/jobs/{job['id']}").json().get("progress") or {}).get("done", 0)
            if done >= 60:
                break
            time.sleep(0.05)
        assert 60 <= done < n, done  # killed mid-add
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc = serve_cli(tmp_path, port, model="slow:0.01")
        final = wait_done(base, job["id"], 300)
        stored = httpx.get(f"{base}/v1/memories/bg/messages?start=1&end=100000", timeout=60).json()["messages"]
    finally:
        stop(proc)
    assert final["state"] == "done" and final["attempts"] == 2, final
    assert [m["content"] for m in stored] == [m["content"] for m in msgs]  # each once, in order
    assert [m["position"] for m in stored] == list(range(1, n + 1))
    assert final["progress"]["done"] == final["progress"]["total"] == n
