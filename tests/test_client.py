"""LLMClient: cache, repair of invalid replies, retries, the ledger and the concurrency limit."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import tenacity.nap
from pydantic import BaseModel

from knowtree.errors import ModelCallError, ModelOutputError, TransientModelError
from knowtree.llm.base import Completion, Message, Request
from knowtree.llm.client import ClientOptions, LLMClient, MemoryCallStore, parse_json_tolerant
from knowtree.store import open_store
from knowtree.testing.models import FunctionModel, ScriptedModel

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"reason": {"type": "string"}, "choice": {"type": "integer"}},
    "required": ["reason", "choice"],
}
MESSAGES = [Message(role="system", content="Be exact."), Message(role="user", content="Pick an option.")]


class Pick(BaseModel):
    reason: str
    choice: int


def in_range(reply: Pick) -> None:
    if not 0 <= reply.choice < 3:
        raise ValueError(f"choice must be one of [0, 1, 2], got {reply.choice}")


def ask(client: LLMClient, **kwargs: Any) -> Any:
    return client.structured(MESSAGES, Pick, schema=SCHEMA, purpose="choose", **kwargs)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Retries do not really wait; the waits tenacity asked for are recorded instead."""
    waited: list[float] = []
    monkeypatch.setattr(tenacity.nap.time, "sleep", waited.append)
    return waited


# -- cache -----------------------------------------------------------------------------------------


def test_identical_request_is_answered_from_the_cache() -> None:
    model = ScriptedModel([{"reason": "r", "choice": 1}])
    client = LLMClient(model)
    first = ask(client)
    second = ask(client)
    assert first.value == second.value == Pick(reason="r", choice=1)
    assert len(model.requests) == 1
    assert not first.cached and second.cached
    assert second.usage.calls == 0 and second.usage.cached == 1
    assert client.usage.calls == 1 and client.usage.cached == 1


def test_cache_is_shared_through_the_store_but_keyed_by_model_id() -> None:
    store = MemoryCallStore()
    a = ScriptedModel([{"reason": "a", "choice": 0}], id="model-a")
    b = ScriptedModel([{"reason": "b", "choice": 2}], id="model-b")
    assert ask(LLMClient(a, store)).value.reason == "a"
    assert ask(LLMClient(b, store)).value.reason == "b"  # same request, other model: not a hit
    assert len(a.requests) == len(b.requests) == 1
    again = ScriptedModel([], id="model-a")
    assert ask(LLMClient(again, store)).value.reason == "a"  # a new client, same model id: a hit
    request = Request(messages=MESSAGES, schema=SCHEMA)
    assert request.cache_key("model-a") != request.cache_key("model-b")
    assert request.cache_key("model-a") == Request(messages=MESSAGES, schema=SCHEMA).cache_key("model-a")


def test_cache_key_covers_every_field_of_the_request() -> None:
    base = Request(messages=MESSAGES, schema=SCHEMA, max_tokens=100)
    variants = [
        Request(messages=MESSAGES[:1], schema=SCHEMA, max_tokens=100),
        Request(messages=MESSAGES, schema=None, max_tokens=100),
        Request(messages=MESSAGES, schema=SCHEMA, max_tokens=200),
        Request(messages=MESSAGES, schema=SCHEMA, max_tokens=100, temperature=0.5),
    ]
    keys = {base.cache_key("m")} | {v.cache_key("m") for v in variants}
    assert len(keys) == 5


# -- parsing and repair ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('```\n{"a": 1}\n```', {"a": 1}),
        ('Sure! Here it is: {"a": 1}', {"a": 1}),
        ("", None),
        ("no json here at all", None),
    ],
)
def test_parse_json_tolerant(text: str, expected: Any) -> None:
    assert parse_json_tolerant(text) == expected


def test_fenced_json_is_parsed_without_a_repair_call() -> None:
    model = ScriptedModel(['```json\n{"reason": "fenced", "choice": 2}\n```'])
    result = ask(LLMClient(model))
    assert result.value == Pick(reason="fenced", choice=2)
    assert result.attempts == 1 and result.errors == []
    assert len(model.requests) == 1


def test_invalid_json_is_repaired_with_the_error_fed_back() -> None:
    model = ScriptedModel(["I think option one is best.", {"reason": "ok", "choice": 1}])
    result = ask(LLMClient(model))
    assert result.value.choice == 1
    assert result.attempts == 2 and len(result.errors) == 1
    assert len(model.requests) == 2
    retry = model.requests[1]
    assert retry.messages[: len(MESSAGES)] == MESSAGES  # the original conversation comes first
    assert retry.messages[-2].role == "assistant"
    assert retry.messages[-2].content == "I think option one is best."
    assert retry.messages[-1].role == "user"
    assert "not valid" in retry.messages[-1].content
    assert result.usage.calls == 2


def test_wrong_types_are_repaired() -> None:
    model = ScriptedModel([{"reason": "r", "choice": "the second"}, {"reason": "r", "choice": 1}])
    result = ask(LLMClient(model))
    assert result.value.choice == 1 and result.attempts == 2
    assert "choice" in model.requests[1].messages[-1].content  # the field is named in the feedback


def test_a_reply_that_is_not_an_object_is_repaired() -> None:
    model = ScriptedModel(["[1, 2, 3]", {"reason": "r", "choice": 0}])
    result = ask(LLMClient(model))
    assert result.value.choice == 0
    assert "object" in result.errors[0]


def test_semantic_check_failure_is_repaired() -> None:
    model = ScriptedModel([{"reason": "r", "choice": 7}, {"reason": "r", "choice": 2}])
    result = ask(LLMClient(model), check=in_range)
    assert result.value.choice == 2 and result.attempts == 2
    feedback = model.requests[1].messages[-1].content
    assert "not valid" in feedback and "got 7" in feedback


def test_truncated_reply_is_retried_with_more_tokens() -> None:
    model = ScriptedModel(
        [
            Completion(text='{"reason": "this reply was cut o', finish_reason="length"),
            {"reason": "short", "choice": 0},
        ]
    )
    result = ask(LLMClient(model), max_tokens=100)
    assert result.value.choice == 0
    assert [r.max_tokens for r in model.requests] == [100, 200]
    assert "cut off" in model.requests[1].messages[-1].content


def test_still_invalid_after_the_repair_attempts_raises_model_output_error() -> None:
    model = ScriptedModel(["nope", "still nope", "nope again", "never used"])
    client = LLMClient(model, options=ClientOptions(repair_attempts=2))
    with pytest.raises(ModelOutputError) as info:
        ask(client)
    assert info.value.raw == "nope again"
    assert info.value.attempts == 3
    assert "choose" in str(info.value)
    assert len(model.requests) == 3 and model.remaining == 1


def test_every_repair_attempt_reaches_the_model() -> None:
    model = ScriptedModel(["nope", "nope", {"reason": "third time lucky", "choice": 1}])
    client = LLMClient(model, options=ClientOptions(repair_attempts=2))
    result = ask(client)
    assert result.value.choice == 1 and result.attempts == 3
    assert len(model.requests) == 3 and client.usage.cached == 0


def test_repair_attempts_zero_means_one_call() -> None:
    model = ScriptedModel(["nope"])
    with pytest.raises(ModelOutputError) as info:
        ask(LLMClient(model, options=ClientOptions(repair_attempts=0)))
    assert info.value.attempts == 1 and len(model.requests) == 1


# -- retries ---------------------------------------------------------------------------------------


def test_transient_error_is_retried_and_honours_retry_after(sleeps: list[float]) -> None:
    model = ScriptedModel(
        [TransientModelError("429 slow down", retry_after=7.5), {"reason": "r", "choice": 1}]
    )
    client = LLMClient(model, options=ClientOptions(max_retries=3))
    result = ask(client)
    assert result.value.choice == 1
    assert len(model.requests) == 2
    assert sleeps == [7.5]  # the backoff (1-2 s here) is raised to the server's Retry-After
    assert result.usage.calls == 1  # one logical call, however many attempts it took


def test_transient_error_without_retry_after_uses_backoff(sleeps: list[float]) -> None:
    model = ScriptedModel(
        [TransientModelError("503"), TransientModelError("503"), {"reason": "r", "choice": 1}]
    )
    ask(LLMClient(model, options=ClientOptions(max_retries=3)))
    assert len(sleeps) == 2
    assert 1.0 <= sleeps[0] <= 2.0 and 2.0 <= sleeps[1] <= 3.0


def test_retry_after_is_capped(sleeps: list[float]) -> None:
    model = ScriptedModel([TransientModelError("429", retry_after=10_000), {"reason": "r", "choice": 1}])
    ask(LLMClient(model, options=ClientOptions(max_retries=1, max_wait_s=2.0)))
    assert sleeps == [10.0]  # max_wait_s * 5


def test_transient_errors_stop_after_max_retries(sleeps: list[float]) -> None:
    model = ScriptedModel([TransientModelError("503")] * 3)
    with pytest.raises(TransientModelError):
        ask(LLMClient(model, options=ClientOptions(max_retries=2)))
    assert len(model.requests) == 3 and len(sleeps) == 2


def test_non_transient_call_error_is_not_retried(sleeps: list[float]) -> None:
    model = ScriptedModel([ModelCallError("401 bad key"), {"reason": "never", "choice": 0}])
    with pytest.raises(ModelCallError, match="bad key"):
        ask(LLMClient(model, options=ClientOptions(max_retries=4)))
    assert len(model.requests) == 1 and sleeps == []


def test_failed_call_is_not_cached() -> None:
    store = MemoryCallStore()
    failing = ScriptedModel([ModelCallError("boom")], id="m")
    with pytest.raises(ModelCallError):
        ask(LLMClient(failing, store, ClientOptions(max_retries=0)))
    assert store.cache == {}
    working = ScriptedModel([{"reason": "r", "choice": 0}], id="m")
    assert ask(LLMClient(working, store)).value.choice == 0
    assert len(working.requests) == 1


# -- the ledger ------------------------------------------------------------------------------------


def test_ledger_rows_in_sqlite(tmp_path: Path) -> None:
    store = open_store(tmp_path / "kb.db")  # PostgreSQL in the suite's PostgreSQL mode
    run_id = store.start_run("ask", "t")
    model = ScriptedModel(
        [
            Completion(text='{"reason": "r", "choice": 1}', input_tokens=30, output_tokens=5),
            ModelCallError("server said no"),
        ]
    )
    client = LLMClient(model, store, ClientOptions(max_retries=0), run_id=run_id)
    ask(client)
    ask(client)  # a cache hit
    with pytest.raises(ModelCallError):
        client.structured([Message(role="user", content="other")], Pick, schema=SCHEMA, purpose="read")
    rows = store._query(
        "SELECT run_id, model, purpose, cached, input_tokens, output_tokens, error FROM llm_calls ORDER BY seq"
    )
    assert rows == [
        (run_id, "scripted", "choose", 0, 30, 5, None),
        (run_id, "scripted", "choose", 1, 0, 0, None),
        (run_id, "scripted", "read", 0, 0, 0, "ModelCallError: server said no"),
    ]
    usage = store.run_usage(run_id)
    assert (usage.calls, usage.cached, usage.input_tokens, usage.output_tokens) == (2, 1, 30, 5)
    # the cache survives the process: a new store on the same file answers the same request
    store.close()
    again = open_store(tmp_path / "kb.db")
    replay = ScriptedModel([])
    assert ask(LLMClient(replay, again)).cached
    again.close()


def test_cost_is_computed_from_the_model_prices() -> None:
    model = ScriptedModel(
        [Completion(text='{"reason": "r", "choice": 0}', input_tokens=1000, output_tokens=500)]
    )
    model.input_cost_per_mtok, model.output_cost_per_mtok = 2.0, 10.0
    result = ask(LLMClient(model))
    assert result.usage.cost_usd == pytest.approx((1000 * 2.0 + 500 * 10.0) / 1e6)


def test_listeners_see_every_call() -> None:
    seen: list[tuple[int, bool]] = []
    client = LLMClient(ScriptedModel([{"reason": "r", "choice": 0}]))
    client.listeners.append(lambda usage, cached: seen.append((usage.calls, cached)))
    ask(client)
    ask(client)
    assert seen == [(1, False), (0, True)]


# -- concurrency -----------------------------------------------------------------------------------


def test_concurrency_limit_holds_across_threads() -> None:
    lock = threading.Lock()
    active = 0
    peak = 0

    def slow(request: Request) -> dict[str, Any]:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.02)
        with lock:
            active -= 1
        return {"reason": request.messages[-1].content, "choice": 0}

    model = FunctionModel(slow, max_concurrency=8)
    client = LLMClient(model, options=ClientOptions(concurrency=2))
    assert client.concurrency == 2
    results: list[str] = []
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            msgs = [Message(role="user", content=f"question {i}")]
            results.append(client.structured(msgs, Pick, schema=SCHEMA, purpose="choose").value.reason)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(results) == sorted(f"question {i}" for i in range(8))
    assert len(model.requests) == 8
    assert 1 <= peak <= 2


def test_model_max_concurrency_caps_the_client() -> None:
    model = FunctionModel(lambda r: {"reason": "r", "choice": 0}, max_concurrency=1)
    assert LLMClient(model, options=ClientOptions(concurrency=8)).concurrency == 1


# -- the test suite's own guard --------------------------------------------------------------------


def test_network_is_blocked_but_loopback_works() -> None:
    import socket

    with pytest.raises(RuntimeError, match="network"):
        socket.create_connection(("203.0.113.7", 443), timeout=0.1)
    with socket.socket() as s, pytest.raises(RuntimeError, match="network"):
        s.connect(("198.51.100.1", 80))
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=1):
            conn, _ = server.accept()
            conn.close()
